/**
 * Issue 31, items 7–10: what a failed pass hands back, and what a pass counts when its lease is
 * lost under it. Each test drives a real pass against the real database and the local bus, and
 * takes the lease away (or loses an answer) at a step where the pass cannot know it yet.
 */
import { describe, expect, it } from 'vitest';
import { connect, type Sql } from '../../shared/platform/index.ts';
import { enqueueMany } from '../../shared/producer/index.ts';
import { Lease } from '../../shared/relay/lease.ts';
import { passWithLease, UnreturnedLeases } from '../../shared/relay/loop.ts';
import { relayPass } from '../../shared/relay/pass.ts';
import type { PassCheckpoint, RelayDeps } from '../../shared/relay/pass-options.ts';
import { claimBatch } from '../../shared/relay/sql/index.ts';
import { useHarness } from '../support/harness.ts';
import { claimOptions, testClient, testSettings } from '../support/relay.ts';
import { startStallProxy } from '../support/stall-proxy.ts';

const h = useHarness({ max: 6 });

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

const rowOf = async (aggregateId: string, sequence: number) => {
  const [row] = await h.db.sql<{ id: string; attempts: number; leased: boolean; dead: boolean }[]>`
    select id, attempts, lease_token is not null as leased, dead_lettered_at is not null as dead
    from outbox where aggregate_id = ${aggregateId} and sequence = ${sequence}`;
  if (!row) throw new Error(`no row ${aggregateId}#${sequence}`);
  return row;
};

/** Another relay takes `id` over: its lease is run out, and a claim of another relay leases it. */
async function takeOver(id: string): Promise<void> {
  await h.db.sql`update outbox set lease_expires_at = now() - interval '1 second' where id = ${id}`;
  const claimed = await claimBatch(h.db.sql, claimOptions(crypto.randomUUID()));
  expect(claimed.map((e) => e.id)).toContain(id);
}

/** A pass of its own lease whose checkpoint runs `at` once the pass reaches `when` for the `nth` time. */
function passWith(deps: RelayDeps, when: PassCheckpoint, nth: number, at: () => Promise<void>) {
  const lease = new Lease(30);
  let seen = 0;
  const counts = relayPass(deps, lease, {
    checkpoint: async (step) => {
      if (step === when && ++seen === nth) await at();
    },
  });
  return { lease, counts };
}

describe('counts when the lease is lost before the outcome is written (item 10)', () => {
  it('does not count as dead-lettered a successor exhausted at round start whose row another relay took', async () => {
    await seed('a', 2);
    const a2 = await rowOf('a', 2);
    // started twice as a successor before, each time without an outcome
    await h.db.sql`update outbox set attempts = 2 where id = ${a2.id}`;
    const deps = { sql: h.db.sql, client: testClient(h.bus.url), settings: testSettings({ maxAttempts: 2 }) };
    // round 2 starts a#2 (3 > 2: dead-lettered instead of sent); before that is written, another
    // relay takes a#2 over
    const { counts } = passWith(deps, 'sent', 2, () => takeOver(a2.id));
    expect(await counts).toMatchObject({ published: 1, deadLettered: 0, leaseLost: 1 });
    expect(await rowOf('a', 2)).toMatchObject({ dead: false, leased: true });
  });

  it('counts a retry recorded beside a dead letter whose lease was lost as retried, the dead letter as neither', async () => {
    await seed('a', 1);
    await seed('b', 1);
    const b1 = await rowOf('b', 1);
    // b#1 spends its last attempt at this claim: its retryable failure dead-letters it
    await h.db.sql`update outbox set attempts = 2 where id = ${b1.id}`;
    h.bus.setFaults({ poisonMarker: '"aggregateType":"order"', poisonCode: 'InternalFailure' });
    const deps = {
      sql: h.db.sql,
      client: testClient(h.bus.url, { maxAttempts: 1 }),
      settings: testSettings({ maxAttempts: 3 }),
    };
    const { counts } = passWith(deps, 'sent', 1, () => takeOver(b1.id));
    expect(await counts).toMatchObject({ retried: 1, deadLettered: 0, leaseLost: 1 });
    expect(await rowOf('a', 1)).toMatchObject({ attempts: 1, leased: false, dead: false });
    expect(await rowOf('b', 1)).toMatchObject({ dead: false, leased: true });
  });
});

describe('a round start whose answer never came (item 9)', () => {
  it('hands back the attempt the start spent on the server', async () => {
    await seed('a', 2);
    const target = new URL(h.db.url);
    const proxy = await startStallProxy({ host: target.hostname, port: Number(target.port || 5432) });
    // one connection: what is sent after the held statement runs after it
    const sql = connect({ url: proxy.urlFor(h.db.url), max: 1, env: {}, applicationName: 'relay-item-9' });
    try {
      const deps = { sql, client: testClient(h.bus.url), settings: testSettings() };
      const lease = new Lease(5);
      let rounds = 0;
      // Round 1 publishes a#1; round 2's start of a#2 is held on its way, and the watchdog ends
      // the pass (1.5 s before the 5 s lease) before it answers.
      const failure = await relayPass(deps, lease, {
        checkpoint: async (at) => {
          if (at === 'round' && ++rounds === 2) proxy.hold();
        },
      }).then(
        () => undefined,
        (error: unknown) => error,
      );
      expect(failure).toMatchObject({ code: 'OUTBOX_DEADLINE' });
      // The start reaches the server, late, and spends a#2's attempt there; then the loop hands
      // the lease back.
      proxy.release();
      const unreturned = new UnreturnedLeases();
      unreturned.add(lease);
      expect(await unreturned.handBack(sql)).toBe(1);
      expect(await rowOf('a', 2)).toMatchObject({ attempts: 0, leased: false, dead: false });
    } finally {
      proxy.release();
      await sql.end({ timeout: 2 });
      await proxy.close();
    }
  }, 30_000);
});

/** A relay's pool of one connection through a stall proxy: what is sent after a held statement runs after it. */
async function stalledRelay(name: string) {
  const target = new URL(h.db.url);
  const proxy = await startStallProxy({ host: target.hostname, port: Number(target.port || 5432) });
  const sql = connect({ url: proxy.urlFor(h.db.url), max: 1, env: {}, applicationName: name });
  return {
    proxy,
    sql,
    close: async () => {
      proxy.release();
      await sql.end({ timeout: 2 });
      await proxy.close();
    },
  };
}

/**
 * A pass whose claim is held on its way until the watchdog ends the pass (1.5 s before its 5 s
 * lease); then the claim reaches the server, late, and the loop remembers the lease to hand back.
 */
async function passWhoseClaimNeverAnswered(sql: Sql, proxy: { hold(): void; release(): void }) {
  const lease = new Lease(5);
  proxy.hold();
  const failure = await relayPass(
    { sql, client: testClient(h.bus.url), settings: testSettings() },
    lease,
  ).then(
    () => undefined,
    (error: unknown) => error,
  );
  expect(failure).toMatchObject({ code: 'OUTBOX_DEADLINE' });
  proxy.release();
  // (runs after the late claim, on the same connection)
  await sql`select 1`;
  const unreturned = new UnreturnedLeases();
  unreturned.add(lease);
  return { lease, unreturned };
}

/** The outbox rows a transaction's scans returned so far (sequential and every index's). */
async function rowsRead(tx: Sql) {
  const [read] = await tx<{ rows: string }[]>`
    select pg_stat_get_xact_tuples_returned('outbox'::regclass) + (
      select sum(pg_stat_get_xact_tuples_returned(indexrelid)) from pg_index
      where indrelid = 'outbox'::regclass) as rows`;
  return Number(read?.rows);
}

describe('a claim whose answer never came (items 7 and 8)', () => {
  it('leaves nothing leased or charged, and its hand-back does not read the backlog', async () => {
    // 20,000 pending rows behind the 100 aggregates a claim takes
    await h.db.sql`
      insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
      select 'order', 'o-' || a, 1, 'Changed', 'test.handback', '{}'::jsonb
      from generate_series(1, 20000) a`;
    await h.db.sql`vacuum analyze outbox`;
    const relay = await stalledRelay('relay-item-7');
    try {
      const { unreturned } = await passWhoseClaimNeverAnswered(relay.sql, relay.proxy);
      const read = await h.db.sql.begin(async (tx) => {
        await unreturned.handBack(tx as unknown as Sql);
        return rowsRead(tx as unknown as Sql);
      });
      const [state] = await h.db.sql<{ leased: number; charged: number }[]>`
        select count(*) filter (where lease_token is not null)::int as leased,
               count(*) filter (where attempts > 0)::int as charged
        from outbox`;
      expect({ ...state, read: read <= 200 ? 'at most 200' : read }).toEqual({
        leased: 0,
        charged: 0,
        read: 'at most 200',
      });
    } finally {
      await relay.close();
    }
  }, 60_000);

  it('gives back no attempt to a successor when another relay has taken the head since', async () => {
    await seed('a', 3);
    const a2 = await rowOf('a', 2);
    // started once as a successor before, without an outcome: an attempt of its own
    await h.db.sql`update outbox set attempts = 1 where id = ${a2.id}`;
    const relay = await stalledRelay('relay-item-8');
    try {
      const { lease, unreturned } = await passWhoseClaimNeverAnswered(relay.sql, relay.proxy);
      // The lease runs out before the hand-back, and a relay claiming one event an aggregate
      // (OUTBOX_PER_AGGREGATE_LIMIT=1) takes the head, a#1.
      await h.db.sql`
        update outbox set lease_expires_at = now() - interval '1 second' where lease_token = ${lease.token}::uuid`;
      const taken = await claimBatch(h.db.sql, claimOptions(crypto.randomUUID(), { perAggregateLimit: 1 }));
      expect(taken.map((e) => [e.aggregateId, e.sequence])).toEqual([['a', '1']]);
      await unreturned.handBack(h.db.sql);
      // a#1: the new owner's claim only; a#2 keeps its own attempt; a#3 spent nothing
      const attempts = await h.db.sql<{ sequence: string; attempts: number }[]>`
        select sequence, attempts from outbox order by sequence`;
      expect(attempts).toEqual([
        { sequence: '1', attempts: 1 },
        { sequence: '2', attempts: 1 },
        { sequence: '3', attempts: 0 },
      ]);
    } finally {
      await relay.close();
    }
  }, 30_000);
});

describe('leases left to hand back (item 7)', () => {
  it('never keep the relay from claiming: a row another transaction holds locked is left for a later try', async () => {
    await seed('a', 3);
    await seed('b', 1);
    const deps = { sql: h.db.sql, client: testClient(h.bus.url), settings: testSettings() };
    // A pass fails once its claim answered (its connection lost): it holds a#1–a#3 and b#1.
    const { lease, counts } = passWith(deps, 'claimed', 1, async () => {
      throw new Error('connection lost');
    });
    await expect(counts).rejects.toThrow('connection lost');
    const unreturned = new UnreturnedLeases();
    unreturned.add(lease);
    // Another transaction holds aggregate a's rows locked (an operator's, a stalled writer's).
    let unlock: () => void = () => {};
    const locked = new Promise<void>((resolve) => {
      unlock = resolve;
    });
    let holding: () => void = () => {};
    const held = new Promise<void>((resolve) => {
      holding = resolve;
    });
    const lockTx = h.db.sql.begin(async (tx) => {
      await tx`select id from outbox where aggregate_id = 'a' for update`;
      holding();
      await locked;
    });
    await held;
    try {
      await seed('c', 1);
      const started = performance.now();
      const next = await passWithLease(deps, 30, unreturned, { endBy: performance.now() + 6_000 });
      // b#1 handed back and published with c#1, without waiting for a's rows
      expect({ published: next.published, waitedMs: performance.now() - started < 3_000 }).toEqual({
        published: 2,
        waitedMs: true,
      });
    } finally {
      unlock();
      await lockTx;
    }
    // Once the lock is gone, the next try hands a's rows back, each attempt returned.
    expect(await unreturned.handBack(h.db.sql)).toBe(3);
    expect(unreturned.size).toBe(0);
    const a = await h.db.sql<{ attempts: number; leased: boolean }[]>`
      select attempts, lease_token is not null as leased from outbox where aggregate_id = 'a' order by sequence`;
    expect(a).toEqual(Array.from({ length: 3 }, () => ({ attempts: 0, leased: false })));
  }, 30_000);
});

describe('a relay frozen inside its claim transaction', () => {
  it('holds its rows no longer than the session idle timeout the relay pool sends; they come back unleased and unspent', async () => {
    await seed('frozen', 1);
    // The relay pool's startup parameter (createRelay sends the lease); behind a pooler the role's default.
    const frozen = connect({ url: h.db.url, max: 1, env: {}, idleInTransactionTimeoutMs: 1_000 });
    try {
      const held = frozen.begin(async (tx) => {
        const claimed = await claimBatch(tx, claimOptions('00000000-0000-4000-8000-0000000f0000'));
        expect(claimed.map((c) => c.aggregateId)).toContain('frozen');
        await new Promise((resolve) => setTimeout(resolve, 2_500)); // frozen between answer and COMMIT
      });
      await expect(held).rejects.toBeTruthy(); // the server ended the session: COMMIT never happened
      const row = await rowOf('frozen', 1);
      expect(row).toMatchObject({ attempts: 0, leased: false });
      const again = await claimBatch(h.db.sql, claimOptions('00000000-0000-4000-8000-0000000f0001'));
      expect(again.map((c) => c.aggregateId)).toContain('frozen');
    } finally {
      await frozen.end({ timeout: 1 });
    }
  });
});
