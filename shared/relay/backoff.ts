/**
 * Retry delay: exponential backoff with full jitter (a uniformly random delay between 0 and
 * min(max, base × 2^(attempt−1))), which spreads retries of many rows failing together — see the
 * AWS Architecture Blog, "Exponential Backoff And Jitter".
 * @param attempt the attempt that just failed, 1-based
 * @returns milliseconds
 */
export function backoffDelayMs(
  attempt: number,
  baseMs: number,
  maxMs: number,
  random: () => number = Math.random,
): number {
  const ceiling = Math.min(maxMs, baseMs * 2 ** Math.min(Math.max(attempt - 1, 0), 30));
  return Math.floor(random() * ceiling);
}
