/**
 * Claims that overlap other writers in Postgres for real: a claim not yet committed while an
 * operator replays a dead letter and another relay claims, and a relay's unpark racing another
 * relay's backoff. Each interleaving is driven step by step on separate connections.
 */
import { describe, expect, it } from 'vitest';
import { enqueueMany } from '../../shared/producer/index.ts';
import { replayDeadLetters } from '../../shared/relay/operations/dead-letters.ts';
import {
  claimBatch,
  markPublished,
  recordFailures,
  releaseUnsent,
  unparkNextEvents,
} from '../../shared/relay/sql/index.ts';
import type { ClaimedEvent } from '../../shared/relay/types.ts';
import { useHarness } from '../support/harness.ts';
import { claimOptions } from '../support/relay.ts';

const h = useHarness({ max: 8 });

const seed = (aggregateId: string, n: number) =>
  h.db.sql.begin((tx) =>
    enqueueMany(
      tx,
      Array.from({ length: n }, (_, i) => ({
        type: 'OrderChanged',
        source: 'shop.orders',
        aggregateType: 'order',
        aggregateId,
        payload: { n: i + 1 },
      })),
    ),
  );

/** Resolves once `work` settled or some backend of the test database waits for a row lock. */
async function settledOrWaitingOnLock(work: Promise<unknown>): Promise<'settled' | 'waiting'> {
  let settled = false;
  void work.then(
    () => {
      settled = true;
    },
    () => {
      settled = true;
    },
  );
  const started = Date.now();
  for (;;) {
    if (settled) return 'settled';
    const [row] = await h.db.sql<{ n: number }[]>`
      select count(*)::int as n from pg_stat_activity
      where datname = current_database() and wait_event_type = 'Lock'`;
    if ((row?.n ?? 0) > 0) return 'waiting';
    if (Date.now() - started > 10_000) throw new Error('neither settled nor waiting on a lock within 10 s');
    await new Promise((r) => setTimeout(r, 10));
  }
}

const bySequence = (events: readonly ClaimedEvent[]) =>
  events.map((e) => Number(e.sequence)).sort((a, b) => a - b);

describe('claim races', () => {
  it('a replay racing an uncommitted claim never lets a second claim take the rows that claim holds', async () => {
    await seed('o-1', 5);
    await h.db
      .sql`update outbox set dead_lettered_at = now(), last_error = 'InvalidArgument: x' where sequence = 1`;
    const tokenC = crypto.randomUUID();
    const tokenB = crypto.randomUUID();

    // Relay C claims event 2 (the head, with 1 dead-lettered under `continue`) and 3, and has not
    // committed yet.
    let commitC: () => void = () => {};
    const gate = new Promise<void>((resolve) => {
      commitC = resolve;
    });
    let claimedByC: ClaimedEvent[] = [];
    const claimC = h.db.sql.begin(async (tx) => {
      claimedByC = await claimBatch(tx, claimOptions(tokenC, { perAggregateLimit: 2 }));
      await gate;
    });
    while (claimedByC.length === 0) await new Promise((r) => setTimeout(r, 5));
    expect(bySequence(claimedByC)).toEqual([2, 3]);

    // An operator replays event 1; relay B claims it as the head, with room for three successors.
    expect(
      await replayDeadLetters(h.db.sql, [(await h.db.sql`select id from outbox where sequence = 1`)[0]?.id]),
    ).toBe(1);
    const claimB = claimBatch(h.db.sql, claimOptions(tokenB, { perAggregateLimit: 4 }));
    await settledOrWaitingOnLock(claimB);
    commitC();
    await claimC;
    const claimedByB = await claimB;

    // C's lease is intact; B holds event 1 only: not 2 and 3 (C's), nor 4 and 5 across that gap.
    expect(bySequence(claimedByB)).toEqual([1]);
    const leases = await h.db.sql<{ sequence: string; lease_token: string | null }[]>`
      select sequence, lease_token from outbox order by sequence`;
    expect(leases.map((r) => [r.sequence, r.lease_token])).toEqual([
      ['1', tokenB],
      ['2', tokenC],
      ['3', tokenC],
      ['4', null],
      ['5', null],
    ]);
  });

  it("a relay's unpark leaves another relay's backoff alone", async () => {
    await seed('o-1', 6);
    const tokenA = crypto.randomUUID();
    const tokenB = crypto.randomUUID();
    // Relay A claims 1 and 2 (parking 4-6 behind the next head, 3) and publishes them.
    const claimedByA = await claimBatch(h.db.sql, claimOptions(tokenA, { perAggregateLimit: 2 }));
    expect(bySequence(claimedByA)).toEqual([1, 2]);
    expect(
      await markPublished(
        h.db.sql,
        tokenA,
        claimedByA.map((e) => e.id),
      ),
    ).toBe(2);
    // Before A unparks, relay B claims 3 (and 4), and 3 fails: a 60 s backoff, 4 waits behind it.
    const claimedByB = await claimBatch(h.db.sql, claimOptions(tokenB, { perAggregateLimit: 2 }));
    expect(bySequence(claimedByB)).toEqual([3, 4]);
    const [three, four] = [...claimedByB].sort((a, b) => Number(a.sequence) - Number(b.sequence));
    await recordFailures(h.db.sql, tokenB, [
      { id: three?.id as string, error: 'InternalFailure: x', deadLetter: false, retryInMs: 60_000 },
    ]);
    await releaseUnsent(h.db.sql, tokenB, [
      { id: four?.id as string, notBeforeMs: 60_000, giveBackAttempt: false },
    ]);
    // A's group is settled: it unparks its aggregate's next event.
    await unparkNextEvents(h.db.sql, [{ aggregateType: 'order', aggregateId: 'o-1' }]);
    const [row] = await h.db.sql<{ waiting: boolean }[]>`
      select available_at > now() + interval '50 seconds' as waiting from outbox where sequence = 3`;
    expect(row?.waiting).toBe(true);
  });
});
