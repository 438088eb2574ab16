/**
 * After a point-in-time restore of the producer's database (docs/operations.md#after-a-point-in-time-restore):
 * the per-aggregate counters (`outbox_aggregate.last_sequence + sequence_offset`, and the per-type
 * counts behind `typeSequence`) are rolled back with everything else, so new events reuse
 * sequences consumers have already seen. `outbox counters advance --by N` moves every counter N
 * further. Here: events are enqueued, the counters snapshotted, more events enqueued (published,
 * then lost by the restore), the counters put back to the snapshot, and the command run; what is
 * enqueued next must number above everything handed out before.
 */
import { describe, expect, it } from 'vitest';
import { enqueue, enqueueMany, type OutboxEvent } from '../../../shared/producer/index.ts';
import { advanceCounters } from '../../../shared/relay/operations/index.ts';
import { cliEnv, runCli } from '../../support/cli.ts';
import { useHarness } from '../../support/harness.ts';

const h = useHarness();

const event = (aggregateId: string, type: string): OutboxEvent => ({
  type,
  source: 'shop.orders',
  aggregateType: 'order',
  aggregateId,
  payload: { type },
});

interface Numbered {
  aggregate_id: string;
  event_type: string;
  sequence: string;
  type_sequence: string | null;
}
/** Every event's numbering, as the relay would publish it. */
const numbering = () =>
  h.db.sql<Numbered[]>`select aggregate_id, event_type, sequence, type_sequence from outbox order by id`;

/** Highest sequence and typeSequence per aggregate (and per aggregate and type) in `rows`. */
function highest(rows: Numbered[]) {
  const sequence = new Map<string, bigint>();
  const typeSequence = new Map<string, bigint>();
  for (const r of rows) {
    const s = BigInt(r.sequence);
    if ((sequence.get(r.aggregate_id) ?? 0n) < s) sequence.set(r.aggregate_id, s);
    const key = `${r.aggregate_id}/${r.event_type}`;
    const t = BigInt(r.type_sequence ?? 0);
    if ((typeSequence.get(key) ?? 0n) < t) typeSequence.set(key, t);
  }
  return { sequence, typeSequence };
}

/** The counters as a restore would bring them back: the rows as they were at the snapshot. */
async function snapshotCounters() {
  return h.db.sql`select * from outbox_aggregate`;
}
async function restoreCounters(snapshot: Awaited<ReturnType<typeof snapshotCounters>>) {
  // Rows, not an UPDATE of last_sequence: a restore brings back the old row versions, and the
  // stale-bump trigger of migration 014 refuses such an update.
  await h.db.sql.begin(async (tx) => {
    await tx`delete from outbox_aggregate`;
    await tx`insert into outbox_aggregate ${tx(snapshot as unknown as Record<string, unknown>[])}`;
  });
}

/** Enqueues the events the producer commits before and after the restore point. */
async function history() {
  await h.db.sql.begin((tx) =>
    enqueueMany(tx, [event('1', 'OrderPlaced'), event('1', 'OrderPaid'), event('2', 'OrderPlaced')]),
  );
  // An aggregate of another type, whose event type is not an order's.
  await h.db.sql.begin((tx) => enqueue(tx, { ...event('c-1', 'CustomerJoined'), aggregateType: 'customer' }));
  await h.db.sql.begin((tx) => enqueue(tx, event('3', 'OrderShipped')));
  const snapshot = await snapshotCounters();
  // After the restore point: published, seen by consumers, then lost with the database.
  for (let i = 0; i < 3; i++) await h.db.sql.begin((tx) => enqueue(tx, event('1', 'OrderPaid')));
  await h.db.sql.begin((tx) => enqueueMany(tx, [event('2', 'OrderShipped'), event('2', 'OrderPlaced')]));
  const seen = highest(await numbering());
  await restoreCounters(snapshot);
  await h.db.sql`truncate outbox`;
  return seen;
}

/** Enqueues one event of each type for both aggregates, through both paths, after the restore. */
async function afterRestore() {
  await h.db.sql.begin((tx) => enqueue(tx, event('1', 'OrderPaid')));
  await h.db.sql.begin((tx) => enqueue(tx, event('1', 'OrderPlaced')));
  await h.db.sql.begin((tx) => enqueueMany(tx, [event('2', 'OrderPlaced'), event('2', 'OrderShipped')]));
  return numbering();
}

function expectAbove(after: Numbered[], seen: ReturnType<typeof highest>) {
  for (const r of after) {
    expect(BigInt(r.sequence), `order ${r.aggregate_id} #${r.sequence}`).toBeGreaterThan(
      seen.sequence.get(r.aggregate_id) ?? 0n,
    );
    const key = `${r.aggregate_id}/${r.event_type}`;
    expect(BigInt(r.type_sequence ?? 0), `${key} typeSequence ${r.type_sequence}`).toBeGreaterThan(
      seen.typeSequence.get(key) ?? 0n,
    );
  }
}

describe('after a point-in-time restore: outbox counters advance', () => {
  it('without it, events after the restore reuse sequences consumers have seen (what the command is for)', async () => {
    const seen = await history();
    const after = await afterRestore();
    const reused = after.filter((r) => BigInt(r.sequence) <= (seen.sequence.get(r.aggregate_id) ?? 0n));
    expect(reused.length).toBeGreaterThan(0);
  });

  it('moves every counter past what was handed out before the restore: sequence and typeSequence', async () => {
    const seen = await history();
    const result = await advanceCounters(h.db.sql, { by: 10, batchSize: 1 });
    expect(result).toMatchObject({ advanced: 4, total: 4, by: '10', dryRun: false });
    expectAbove(await afterRestore(), seen);
    // The restore's own numbering is kept, shifted: order 1 had 2 events at the snapshot, so its next is 2 + 10 + 1.
    const [first] = await numbering();
    expect(first).toMatchObject({ aggregate_id: '1', sequence: '13', type_sequence: '12' });
    // Each counter gets a count for every type known for its aggregate type, and only those.
    const counts = await h.db.sql<{ aggregate_id: string; type_counts: Record<string, number> }[]>`
      select aggregate_id, type_counts from outbox_aggregate where aggregate_id in ('3', 'c-1') order by aggregate_id`;
    expect(counts.map((c) => [c.aggregate_id, c.type_counts])).toEqual([
      ['3', { OrderPaid: 10, OrderPlaced: 10, OrderShipped: 11 }],
      ['c-1', { CustomerJoined: 11 }],
    ]);
  });

  it('--dry-run changes nothing and says what it would do', async () => {
    await history();
    const before = await snapshotCounters();
    const dry = await advanceCounters(h.db.sql, { by: 1_000, batchSize: 1, dryRun: true });
    expect(dry).toMatchObject({ advanced: 0, total: 4, dryRun: true, highestSequence: '2' });
    expect(await snapshotCounters()).toEqual(before);
  });

  it('as the command: dry run, then the advance with progress, and the next events number above', async () => {
    const seen = await history();
    const env = cliEnv({ db: h.db, bus: h.bus });
    const dry = await runCli(['counters', 'advance', '--by', '1000', '--dry-run'], { env });
    expect(dry.stderr).toBe('');
    expect(dry.code).toBe(0);
    expect(dry.stdout).toMatch(
      /would advance 4 counter\(s\) by 1000: the highest sequence now is 2, then 1002/,
    );
    expect(await afterRestore().then((rows) => rows.some((r) => BigInt(r.sequence) <= 2n))).toBe(true);
    await h.db.sql`truncate outbox`;
    await restoreCounters(await snapshotCounters());

    const refused = await runCli(['counters', 'advance', '--by', '1000'], { env });
    expect(refused.code).toBe(1);
    expect(refused.stderr).toMatch(/not confirmed: nothing was changed/);

    const run = await runCli(['counters', 'advance', '--by', '1000', '--yes', '--batch-size', '1'], { env });
    expect(run.code, run.stderr).toBe(0);
    expect(run.stderr).toMatch(/advanced 1 of 4 counter\(s\)/);
    expect(run.stdout).toMatch(/advanced 4 counter\(s\) by 1000/);
    expectAbove(await afterRestore(), seen);

    const json = await runCli(['counters', 'advance', '--by', '5', '--yes', '--json'], { env });
    expect(JSON.parse(json.stdout)).toMatchObject({ advanced: 4, total: 4, by: '5', dryRun: false });
  });

  it('refuses a missing, zero or negative --by', async () => {
    const env = cliEnv({ db: h.db, bus: h.bus });
    for (const args of [[], ['--by', '0'], ['--by', '-5'], ['--by', 'lots']]) {
      const r = await runCli(['counters', 'advance', ...args, '--yes'], { env });
      expect(r.code, args.join(' ')).toBe(2);
      expect(r.stderr, args.join(' ')).toMatch(/--by/);
    }
  });

  it('waits for a producer holding a counter, and numbers that producer’s event below the advance', async () => {
    await history();
    // A producer's transaction holds order 1's counter row while the advance runs.
    let release: () => void = () => {};
    const held = new Promise<void>((r) => {
      release = r;
    });
    let locked: () => void = () => {};
    const lockTaken = new Promise<void>((r) => {
      locked = r;
    });
    const producer = h.db.sql.begin(async (tx) => {
      const r = await enqueue(tx, event('1', 'OrderPaid'));
      locked();
      await held;
      return r;
    });
    await lockTaken;
    const advancing = advanceCounters(h.db.sql, { by: 100, batchSize: 10, lockTimeoutMs: 200 });
    await new Promise((r) => setTimeout(r, 600));
    release();
    const [result, produced] = await Promise.all([advancing, producer]);
    expect(result).toMatchObject({ advanced: 4, total: 4 });
    expect(result.lockRetries).toBeGreaterThan(0);
    expect(produced?.sequence).toBe('3');
    await h.db.sql.begin((tx) => enqueue(tx, event('1', 'OrderPaid')));
    const rows = await numbering();
    expect(rows.at(-1)?.sequence).toBe('104');
  });
});
