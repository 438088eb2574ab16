/**
 * Parking, measured: a hot aggregate's long backlog at the front of the queue costs a claim a
 * bounded number of row reads once it has been walked, whether or not this claim takes the hot
 * aggregate's head, and the other aggregates' heads are claimed all the same. Measured on the claim
 * statement itself (EXPLAIN ANALYZE of what claimBatch sends: rows its scans returned or filtered
 * out), not on wall time or buffers (a backlog written in one go sits on few heap pages, so reading
 * it again costs few buffers here, but about one a row where it was written over hours).
 */
import { describe, expect, it } from 'vitest';
import { connect, type Queryable, type Sql } from '../../shared/platform/index.ts';
import { RELAY_PLAN_CACHE_MODE } from '../../shared/relay/index.ts';
import { type ClaimOptions, claimBatch } from '../../shared/relay/sql/index.ts';
import { useHarness } from '../support/harness.ts';
import { claimOptions } from '../support/relay.ts';

const h = useHarness({ max: 2 });

/** A node of EXPLAIN (FORMAT JSON): rows and removals are per loop. */
interface PlanNode {
  'Node Type': string;
  'Relation Name'?: string;
  'Actual Rows': number;
  'Actual Loops': number;
  'Total Cost': number;
  'Rows Removed by Filter'?: number;
  'Rows Removed by Index Recheck'?: number;
  'Rows Removed by Join Filter'?: number;
  Plans?: PlanNode[];
}

/** Outbox rows the statement's scans read (returned or filtered out), over every loop. */
function rowsRead(node: PlanNode): number {
  const own =
    node['Relation Name'] === 'outbox' && node['Node Type'] !== 'ModifyTable'
      ? (node['Actual Rows'] +
          (node['Rows Removed by Filter'] ?? 0) +
          (node['Rows Removed by Index Recheck'] ?? 0)) *
        node['Actual Loops']
      : 0;
  return own + (node.Plans ?? []).reduce((n, p) => n + rowsRead(p), 0);
}

/** Row pairs the statement's joins compared and threw away, over every loop. */
function joinPairsRemoved(node: PlanNode): number {
  const own = (node['Rows Removed by Join Filter'] ?? 0) * node['Actual Loops'];
  return own + (node.Plans ?? []).reduce((n, p) => n + joinPairsRemoved(p), 0);
}

/**
 * Sends claimBatch's ordered claim statement prefixed with EXPLAIN (`options`).
 * @returns its plan (with ANALYZE in `options` the statement runs: the claim happens)
 */
async function explain(o: ClaimOptions, options: string): Promise<{ Plan: PlanNode }> {
  let plan: { Plan: PlanNode } | undefined;
  const explaining = ((strings: TemplateStringsArray, ...values: unknown[]) => {
    // The claim's statement starts with its head walk; its fragments (row conditions) do not.
    if (!/^\s*with heads as/.test(strings[0] ?? '')) return h.db.sql(strings, ...(values as never[]));
    const prefixed = [`explain (${options}) ${strings[0]}`, ...strings.slice(1)];
    return h.db
      .sql(
        Object.assign(prefixed, { raw: prefixed }) as unknown as TemplateStringsArray,
        ...(values as never[]),
      )
      .then((rows) => {
        plan = (rows[0] as { 'QUERY PLAN': { Plan: PlanNode }[] })['QUERY PLAN'][0];
        return [];
      });
  }) as unknown as Queryable;
  // the claim writes its settings into the statement's text with unsafe fragments
  Object.assign(explaining, { unsafe: h.db.sql.unsafe.bind(h.db.sql) });
  await claimBatch(explaining, o);
  if (plan === undefined) throw new Error('the claim sent no statement starting with its head walk');
  return plan;
}

/**
 * Runs one ordered claim as EXPLAIN (ANALYZE, FORMAT JSON): the claim happens, and the plan comes
 * back instead of the rows.
 * @returns the outbox rows its scans read (its CTEs', `parked` included), and the rows it leased,
 *   as `aggregate#sequence`, by aggregate then sequence
 */
async function explainClaim(
  o: ClaimOptions,
): Promise<{ rowsRead: number; joinPairsRemoved: number; claimed: string[] }> {
  const plan = await explain(o, 'analyze, format json');
  const claimed = await h.db.sql<{ row: string }[]>`
    select aggregate_id || '#' || sequence as row from outbox
    where lease_token = ${o.leaseToken}::uuid order by aggregate_id, sequence`;
  return {
    rowsRead: rowsRead(plan.Plan),
    joinPairsRemoved: joinPairsRemoved(plan.Plan),
    claimed: claimed.map((r) => r.row),
  };
}

/** `backlog` events of aggregate `hot`, then one event each of cold-0000 … cold-(cold − 1). */
async function seedHotAndCold(backlog: number, cold: number) {
  await h.db.sql`
    insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
    select 'item', 'hot', g, 'Changed', 'test.park', '{}'::jsonb from generate_series(1, ${backlog}) g`;
  await h.db.sql`
    insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
    select 'item', 'cold-' || lpad(g::text, 4, '0'), 1, 'Changed', 'test.park', '{}'::jsonb
    from generate_series(0, ${cold - 1}) g`;
  await h.db.sql`vacuum analyze outbox`;
}

const coldHeads = (claimed: string[]) => claimed.filter((r) => r.startsWith('cold-'));

describe('parking', () => {
  it('keeps a 15,000-event backlog from being walked again, when the hot head is in flight', async () => {
    await seedHotAndCold(15_000, 100);
    const o = (token: string) => claimOptions(token, { batchSize: 20, perAggregateLimit: 10 });

    // The first claim walks the whole backlog (the hot head, then 19 cold heads behind it), tests
    // the first 10,000 rows it stepped over (its bound) and parks those beyond #11; the second,
    // with the hot head in flight, walks the rest and parks it.
    const first = await explainClaim(o(crypto.randomUUID()));
    expect(first.claimed.filter((r) => r.startsWith('hot#'))).toEqual(
      Array.from({ length: 10 }, (_, i) => `hot#${i + 1}`),
    );
    expect(coldHeads(first.claimed)).toHaveLength(19);
    const second = await explainClaim(o(crypto.randomUUID()));
    expect(coldHeads(second.claimed)).toHaveLength(20);

    // Every hot row beyond the next group (#11) is parked: none is left for a walk to step over.
    const [left] = await h.db.sql<{ n: number }[]>`
      select count(*)::int as n from outbox
      where aggregate_id = 'hot' and available_at <= now() and lease_expires_at is null`;
    expect(left?.n).toBe(1);

    // The third claim steps over #11 and the rows in flight, not the backlog: 20 more cold heads,
    // in a few hundred row reads (walking the 4,989 rows the first claim left unparked again would
    // read twice that).
    const third = await explainClaim(o(crypto.randomUUID()));
    expect(coldHeads(third.claimed)).toEqual(
      Array.from({ length: 20 }, (_, i) => `cold-${String(39 + i).padStart(4, '0')}#1`),
    );
    expect(third.rowsRead).toBeLessThan(1_000);
  });

  it('does not read a parked backlog again when the hot head is claimed again', async () => {
    // Enough cold aggregates that finding the hot aggregate's available rows among all available
    // rows, rather than through an index of its own, costs more than the bound below.
    await seedHotAndCold(9_000, 2_000);
    const o = (token: string) => claimOptions(token, { batchSize: 20, perAggregateLimit: 10 });
    // Each claim hands its rows back, as a relay that stopped does: the hot head is the first head
    // of every walk, and its group (#1 … #10) and next head (#11) stay unparked.
    const handBack = (token: string) =>
      h.db.sql`update outbox set lease_token = null, lease_expires_at = null, attempts = 0
               where lease_token = ${token}::uuid`;
    const reads: number[] = [];
    for (let i = 0; i < 4; i++) {
      const token = crypto.randomUUID();
      const c = await explainClaim(o(token));
      expect(c.claimed.filter((r) => r.startsWith('hot#'))).toHaveLength(10);
      expect(coldHeads(c.claimed)).toHaveLength(19);
      reads.push(c.rowsRead);
      await handBack(token);
    }
    // The first claim walks and parks the backlog (9,000 rows); the later ones read neither the
    // parked rows nor the rest of the backlog again, to park or to find the head's successors.
    expect(reads[0]).toBeGreaterThan(9_000);
    for (const n of reads.slice(1)) expect(n).toBeLessThan(1_000);
  });

  it('is priced below jit_above_cost at the default settings, however many rows are pending', async () => {
    // 30,000 pending events of as many aggregates: the planner's estimate of the claim grows with
    // the pending rows until its bounds (100 heads, 10,000 rows tested for parking) cap it. Past
    // jit_above_cost (100,000 by default) every claim compiled itself first (~30 ms of CPU).
    await h.db.sql`
      insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
      select 'item', g::text, 1, 'Changed', 'test.park', '{}'::jsonb from generate_series(1, 30000) g`;
    await h.db.sql`vacuum analyze outbox`;
    const o = claimOptions(crypto.randomUUID(), { batchSize: 100, perAggregateLimit: 10 });
    expect((await explain(o, 'format json')).Plan['Total Cost']).toBeLessThan(100_000);
  });

  it('parks without waiting for a row another transaction holds', async () => {
    await seedHotAndCold(100, 5);
    // Another transaction holds hot #50, as a claim that walked the same range and parks it does
    // until it commits (for as long as its COMMIT is held up on the way).
    let locked = () => {};
    const lockTaken = new Promise<void>((resolve) => {
      locked = resolve;
    });
    let release = () => {};
    const released = new Promise<void>((resolve) => {
      release = resolve;
    });
    const holder = h.db.sql.begin(async (tx) => {
      await tx`select id from outbox where aggregate_id = 'hot' and sequence = 50 for update`;
      locked();
      await released;
    });
    await lockTaken;

    const token = crypto.randomUUID();
    const claim = claimBatch(h.db.sql, claimOptions(token, { batchSize: 10, perAggregateLimit: 10 }));
    const first = await Promise.race([
      claim.then(() => 'the claim'),
      new Promise((resolve) => setTimeout(() => resolve('the timer (the claim waited)'), 5_000)),
    ]);
    release();
    await holder;
    await claim;
    expect(first).toBe('the claim');
    // Everything beyond #11 is parked but the row that was held, left for a later claim.
    const unparked = await h.db.sql<{ sequence: string }[]>`
      select sequence from outbox
      where aggregate_id = 'hot' and available_at <= now() and lease_token is distinct from ${token}::uuid
      order by sequence`;
    expect(unparked.map((r) => Number(r.sequence))).toEqual([11, 50]);
  });

  it("is planned at every claim on the relay's pool, and once per connection on a pool left at auto", async () => {
    await h.db.sql`
      insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
      select 'item', g::text, 1, 'Changed', 'test.park', '{}'::jsonb from generate_series(1, 10000) g`;
    await h.db.sql`vacuum analyze outbox`;
    // The relay's pool plans every call (RELAY_PLAN_CACHE_MODE: a kept plan does not follow the
    // backlog, test/relay/claim-plan.test.ts). A pool of one connection left at plan_cache_mode auto
    // (a user's own) keeps the generic plan after five custom plans if it is priced below their
    // running average: the claim is written so that it is (with 10,000 pending rows, a generic
    // plan that assumes a LIMIT reads a tenth of its input was priced above them; after new
    // statistics that raise the estimate, so was one priced the same as a custom plan).
    const relayPool = connect({ url: h.db.url, max: 1, env: {}, planCacheMode: RELAY_PLAN_CACHE_MODE });
    const autoPool = connect({ url: h.db.url, max: 1, env: {} });
    const plans = async (one: Sql) =>
      await one<{ generic: number; custom: number }[]>`
        select generic_plans::int as generic, custom_plans::int as custom from pg_prepared_statements
        where statement like '%with heads as%' and statement not like '%pg_prepared_statements%'`;
    const claims = async (n: number) => {
      for (const one of [relayPool, autoPool]) {
        for (let i = 0; i < n; i++) {
          const token = crypto.randomUUID();
          await claimBatch(one, claimOptions(token, { batchSize: 100, perAggregateLimit: 10 }));
          await one`update outbox set lease_token = null, lease_expires_at = null where lease_token = ${token}::uuid`;
        }
      }
    };
    try {
      await claims(8);
      expect(await plans(relayPool)).toEqual([{ generic: 0, custom: 8 }]);
      expect(await plans(autoPool)).toEqual([{ generic: 3, custom: 5 }]);
      // A published history arrives and is analyzed: the cached plan is made again, generic.
      await h.db.sql`
        insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload, published_at)
        select 'old', g::text, 1, 'Changed', 'test.park', '{}'::jsonb, now() - interval '1 day'
        from generate_series(1, 100000) g`;
      await h.db.sql`analyze outbox`;
      await claims(8);
      expect(await plans(relayPool)).toEqual([{ generic: 0, custom: 16 }]);
      expect(await plans(autoPool)).toEqual([{ generic: 11, custom: 5 }]);
    } finally {
      await relayPool.end({ timeout: 5 });
      await autoPool.end({ timeout: 5 });
    }
  });

  it.each([
    ['without statistics', false],
    ['after ANALYZE', true],
  ])('reads the rows it locks and leases by id, not the whole backlog again (%s)', async (_, analyze) => {
    // 2,000 aggregates of 4 events each, enqueued one round of aggregates after the other (as the
    // db-cost bench does): the claim takes 100 heads and their 3 successors each.
    for (let sequence = 1; sequence <= 4; sequence++)
      await h.db.sql`
        insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
        select 'item', 'a-' || lpad(g::text, 4, '0'), ${sequence}, 'Changed', 'test.park', '{}'::jsonb
        from generate_series(0, 1999) g`;
    if (analyze) await h.db.sql`vacuum analyze outbox`;
    const c = await explainClaim(
      claimOptions(crypto.randomUUID(), { batchSize: 100, perAggregateLimit: 10 }),
    );
    expect(c.claimed).toHaveLength(400);
    // The walk, the successors' windows and the locks read a few rows per claimed row; reading the
    // 8,000 pending rows again (to find 300 successors by id through the pending index) would not.
    expect(c.rowsRead).toBeLessThan(4_000);
    // Each successor is matched with its lock once, not with every locked row (300 × 300).
    expect(c.joinPairsRemoved).toBeLessThan(1_000);
  });

  it('parks every row behind a dead letter that blocks its aggregate (policy block), not only those beyond its group', async () => {
    // Under `block` nothing behind an undiscarded dead letter can be claimed until an operator
    // replays or discards it; left unparked, its next perAggregateLimit rows would be stepped over
    // (and tested for parking, using up the claim's bound) by every claim. With a burst of dead
    // letters (a permission error on every head), that is every claim's whole bound.
    await h.db.sql`
      insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload, dead_lettered_at)
      values ('item', 'blocked', 1, 'Changed', 'test.park', '{}'::jsonb, now())`;
    await h.db.sql`
      insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
      select 'item', 'blocked', g, 'Changed', 'test.park', '{}'::jsonb from generate_series(2, 21) g`;
    await h.db.sql`
      insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
      select 'item', 'cold-' || g, 1, 'Changed', 'test.park', '{}'::jsonb from generate_series(1, 5) g`;
    const c = await explainClaim(
      claimOptions(crypto.randomUUID(), { batchSize: 10, perAggregateLimit: 10, deadLetterPolicy: 'block' }),
    );
    expect(c.claimed).toHaveLength(5);
    const unparked = await h.db.sql<{ sequence: string }[]>`
      select sequence from outbox
      where aggregate_id = 'blocked' and dead_lettered_at is null and available_at <= now()
      order by sequence`;
    expect(unparked.map((r) => Number(r.sequence))).toEqual([]);
  });
});
