/**
 * The lease of one pass, created by the loop and handed to the pass, so that after a failed pass
 * the loop still knows which rows to hand back (no error object is made to carry it).
 *
 * Short leases, renewed: a pass renews its lease while it works, so a slow but live pass keeps its
 * rows while the rows of a relay that died come back one lease length after its last renewal.
 */
import { randomUUID } from 'node:crypto';

/**
 * What a failed pass leaves to hand back (see {@link Lease.leftover}): the rows it still holds,
 * each with the attempts it had before this lease (`attemptsBefore[i]` for `held[i]`), which the
 * hand-back restores whether or not a start whose answer never came spent one.
 */
export interface LeaseLeftover {
  held: readonly string[];
  attemptsBefore: readonly number[];
}

/** A pass's lease: its token, the rows it holds, and how long they are certainly its own. */
export class Lease {
  /** Random uuid stamped on the claimed rows; every later write presents it. */
  readonly token: string = randomUUID();
  /** Lease length, seconds, added to the database clock by the claim and each renewal. */
  readonly seconds: number;
  /** Rows claimed under this lease and not settled yet (int8 ids as strings). */
  readonly held = new Set<string>();
  /** Held rows whose attempt this lease spent: heads at claim, successors when their round started. */
  readonly spent = new Set<string>();
  /** Each claimed row's attempts before this lease spent any (the claim's answer, less a head's one). */
  readonly #attemptsBefore = new Map<string, number>();
  #heldUntil = Number.NEGATIVE_INFINITY;

  /** @param seconds lease length, seconds */
  constructor(seconds: number) {
    this.seconds = seconds;
  }

  /** Lease length, ms. */
  get ms(): number {
    return this.seconds * 1000;
  }

  /**
   * `performance.now()` until which the rows are certainly still this lease's: when the claim or
   * the last renewal was *sent*, plus the lease length. The database's own expiry is later (it
   * counts from when the statement ran), so this never promises more than the database keeps.
   */
  get heldUntil(): number {
    return this.#heldUntil;
  }

  /** ms before {@link heldUntil}. */
  leftMs(now = performance.now()): number {
    return this.#heldUntil - now;
  }

  /** Call just before the claim is sent. */
  claimSending(): void {
    this.#heldUntil = performance.now() + this.ms;
  }

  /**
   * Call with the claim's answer before the claim commits (a claim that commits without it would
   * hold rows no hand-back can find): every claimed row, with its attempts; a head spent one.
   */
  claimed(rows: readonly { id: string; attempts: number; isHead: boolean }[]): void {
    for (const row of rows) {
      this.held.add(row.id);
      if (row.isHead) this.spent.add(row.id);
      this.#attemptsBefore.set(row.id, row.isHead ? row.attempts - 1 : row.attempts);
    }
  }

  /** Successors whose round started: their attempt is spent. */
  started(ids: Iterable<string>): void {
    for (const id of ids) if (this.held.has(id)) this.spent.add(id);
  }

  /** Call just before a renewal is sent; call what it returns once the renewal succeeded. */
  renewalSending(): () => void {
    const until = performance.now() + this.ms;
    return () => {
      this.#heldUntil = Math.max(this.#heldUntil, until);
    };
  }

  /** Rows settled (published, failed, released, or lost to another relay): no longer held. */
  settled(ids: Iterable<string>): void {
    for (const id of ids) {
      this.held.delete(id);
      this.spent.delete(id);
    }
  }

  /**
   * What a failed pass leaves to hand back: the rows it holds, or `undefined` when none can be
   * leased under this token (a claim without an answer is rolled back: see `claimBatchKept`).
   */
  get leftover(): LeaseLeftover | undefined {
    if (this.held.size === 0) return undefined;
    const held = [...this.held];
    return { held, attemptsBefore: held.map((id) => this.#attemptsBefore.get(id) ?? 0) };
  }
}
