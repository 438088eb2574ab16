/**
 * Ctrl-C for long-running commands: the first SIGINT (or SIGTERM) asks for an orderly stop, a
 * later one forces the exit.
 *
 * One Ctrl-C often arrives twice: the terminal sends SIGINT to the whole foreground process group,
 * and `npm run`/`npx` forward it to their child as well. A second signal within
 * {@link DUPLICATE_WINDOW_MS} of the first is therefore the same key press, not an impatient user.
 */

/** Signals closer together than this count as one Ctrl-C, ms. */
export const DUPLICATE_WINDOW_MS = 1_000;

/**
 * Calls `stop` on the first SIGINT or SIGTERM and `force` on a later one (more than
 * {@link DUPLICATE_WINDOW_MS} after the first).
 * @returns a function that removes the handlers (after the duplicate window when a stop was asked for)
 */
export function onInterrupt(stop: () => void, force: () => void): () => void {
  let first: number | undefined;
  const handler = () => {
    const now = performance.now();
    if (first === undefined) {
      first = now;
      stop();
    } else if (now - first > DUPLICATE_WINDOW_MS) {
      force();
    }
  };
  process.on('SIGINT', handler);
  process.on('SIGTERM', handler);
  const remove = () => {
    process.off('SIGINT', handler);
    process.off('SIGTERM', handler);
  };
  return () => {
    // After a stop, the forwarded copy of the same Ctrl-C may still be on its way: without a
    // handler it would kill the process (exit 130) in the middle of its orderly shutdown. So the
    // handlers stay for the duplicate window (the timer does not keep the process alive).
    if (first === undefined) remove();
    else setTimeout(remove, DUPLICATE_WINDOW_MS).unref();
  };
}
