/**
 * mulberry32: a tiny seeded PRNG (32-bit state, uniform in [0, 1)), so that a fault schedule or a
 * run's delays can be replayed from its seed. The local endpoints' fault dice and the bench use it.
 */
export function seeded(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
