import { describe, expect, it } from 'vitest';
import type { AcceptedEvent } from '../../shared/local/bus.ts';
import { connect } from '../../shared/platform/db.ts';
import type { Envelope } from '../../shared/platform/envelope.ts';
import { enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { relayOnce } from '../../shared/relay/loop.ts';
import { claimBatch } from '../../shared/relay/sql/index.ts';
import { useHarness } from '../support/harness.ts';
import { claimOptions, testClient, testSettings } from '../support/relay.ts';

const h = useHarness({ max: 12 });

const ev = (aggregateId: string, payload: Record<string, unknown> = {}): OutboxEvent => ({
  type: 'Changed',
  source: 'test.ordering',
  aggregateType: 'item',
  aggregateId,
  payload,
});

async function seed(events: OutboxEvent[]) {
  for (let i = 0; i < events.length; i += 1_000) {
    await h.db.sql.begin((tx) => enqueueMany(tx, events.slice(i, i + 1_000)));
  }
}

const meta = (e: AcceptedEvent) => (e.detail as unknown as Envelope).metadata;

/**
 * Order violations in the bus's record: an event whose first acceptance came before the first
 * acceptance of its predecessor. Re-sends of an earlier event (duplicates) are not violations.
 */
function orderViolations(events: readonly AcceptedEvent[]): string[] {
  const highest = new Map<string, number>();
  const violations: string[] = [];
  for (const e of events) {
    const m = meta(e);
    const key = `${m.aggregateType}/${m.aggregateId}`;
    const top = highest.get(key) ?? 0;
    if (m.sequence <= top) continue; // a re-send of an event already accepted
    if (m.sequence !== top + 1) violations.push(`${key}: #${m.sequence} accepted before #${top + 1}`);
    highest.set(key, m.sequence);
  }
  return violations;
}

describe('per-aggregate order', () => {
  it('is kept by 4 concurrent relays with faults on, and every event arrives', async () => {
    await seed(Array.from({ length: 4_000 }, (_, i) => ev(`agg-${i % 200}`, { i })));
    h.bus.setFaults({
      latencyMs: [0, 4],
      spikeRate: 0.01,
      spikeMs: 300,
      throttleRate: 0.05,
      serverErrorRate: 0.05,
      entryFailureRate: 0.05,
      lostResponseRate: 0.03,
    });
    const pools = [1, 2, 3, 4].map(() => connect({ url: h.db.url, max: 3, env: {} }));
    try {
      const settings = testSettings({
        batchSize: 50,
        perAggregateLimit: 5,
        maxAttempts: 100,
        backoffBaseMs: 5,
        backoffMaxMs: 40,
      });
      await Promise.all(
        pools.map((sql) =>
          runRelay({ sql, client: testClient(h.bus.url, { maxAttempts: 1 }), settings, untilEmpty: true }),
        ),
      );
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
    expect(
      h.bus.stats.throttled +
        h.bus.stats.serverErrors +
        h.bus.stats.entryFailures +
        h.bus.stats.lostResponses,
    ).toBeGreaterThan(50);
    expect(orderViolations(h.bus.events)).toEqual([]);
    const distinct = new Set(h.bus.events.map((e) => meta(e).eventId));
    expect(distinct.size).toBe(4_000);
    const [left] = await h.db.sql`select count(*)::int as n from outbox where published_at is null`;
    expect(left?.n).toBe(0);
  });

  it('lets a backed-off aggregate delay only itself', async () => {
    h.bus.setFaults({ poisonMarker: 'stuck-here', poisonCode: 'InternalFailure' });
    await seed([ev('stuck', { note: 'stuck-here' }), ev('stuck'), ev('stuck')]);
    await seed(Array.from({ length: 50 }, (_, i) => ev(`free-${i % 10}`)));
    const settings = testSettings({ backoffBaseMs: 60_000, backoffMaxMs: 60_000 });
    const result = await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings,
      random: () => 0.9, // jitter fixed: a 54 s backoff
      signal: AbortSignal.timeout(1_500),
    });
    expect(result.published).toBe(50);
    expect(h.bus.events.filter((e) => meta(e).aggregateId === 'stuck')).toEqual([]);
    const stuck = await h.db.sql<
      { sequence: string; attempts: number; published: boolean; waiting: boolean }[]
    >`
      select sequence, attempts, published_at is not null as published, available_at > now() + interval '20 seconds' as waiting
      from outbox where aggregate_id = 'stuck' order by sequence`;
    expect(stuck.map((r) => [r.sequence, r.attempts, r.published, r.waiting])).toEqual([
      ['1', 1, false, true], // in backoff after its one attempt
      ['2', 0, false, true], // released with its attempt returned, waiting behind #1
      ['3', 0, false, true],
    ]);
  });

  it('does not let a hot aggregate with a 10,000-event backlog starve the others', async () => {
    await seed(Array.from({ length: 10_000 }, (_, i) => ev('hot', { i })));
    await seed(Array.from({ length: 99 }, (_, i) => ev(`cold-${i}`)));
    const client = testClient(h.bus.url);
    const settings = testSettings({ batchSize: 100, perAggregateLimit: 10 });

    // The first pass meets the backlog at the front of the queue, claims the hot aggregate's first
    // window and parks the rest; the second reaches every cold aggregate.
    const first = await relayOnce({ sql: h.db.sql, client, settings });
    const second = await relayOnce({ sql: h.db.sql, client, settings });
    expect(first.published + second.published).toBe(119);
    expect(
      new Set(
        h.bus.events.filter((e) => meta(e).aggregateId.startsWith('cold-')).map((e) => meta(e).aggregateId),
      ).size,
    ).toBe(99);
    // The backlog beyond the first window is parked, so later claims do not re-read it.
    const [unparked] = await h.db.sql`
      select count(*)::int as n from outbox
      where aggregate_id = 'hot' and published_at is null and available_at <= now()`;
    expect(unparked?.n).toBeLessThanOrEqual(11);

    // The hot aggregate keeps moving, several events per pass, in order.
    for (let i = 0; i < 5; i++) await relayOnce({ sql: h.db.sql, client, settings });
    const hot = h.bus.events.filter((e) => meta(e).aggregateId === 'hot').map((e) => meta(e).sequence);
    expect(hot).toEqual(Array.from({ length: 70 }, (_, i) => i + 1));
  });

  it('sends several events of one aggregate in one pass, one after the other', async () => {
    await seed(Array.from({ length: 25 }, () => ev('busy')));
    const result = await relayOnce({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings: testSettings({ perAggregateLimit: 10 }),
    });
    expect(result).toMatchObject({ claimed: 10, published: 10, putEventsCalls: 10 });
    expect(h.bus.events.map((e) => meta(e).sequence)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(new Set(h.bus.events.map((e) => e.requestId)).size).toBe(10); // never two of them in one request
  });

  it('never claims a later event of an aggregate whose head another relay holds', async () => {
    await seed([ev('a'), ev('a'), ev('b')]);
    const first = await claimBatch(h.db.sql, claimOptions(crypto.randomUUID(), { perAggregateLimit: 1 }));
    expect(first.map((e) => `${e.aggregateId}${e.sequence}`).sort()).toEqual(['a1', 'b1']);
    const second = await claimBatch(h.db.sql, claimOptions(crypto.randomUUID(), { perAggregateLimit: 1 }));
    expect(second).toEqual([]); // a2 must wait for a1
  });
});

describe('dead-letter policy', () => {
  const seedWithPoison = async () => {
    h.bus.setFaults({ poisonMarker: 'poison-pill', poisonCode: 'InvalidArgument' });
    await seed([ev('p'), ev('p', { note: 'poison-pill' }), ev('p'), ev('p'), ev('other')]);
  };

  it('continue: later events of the aggregate go on, leaving a visible gap in the sequence', async () => {
    await seedWithPoison();
    const settings = testSettings({ deadLetterPolicy: 'continue' });
    const result = await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings,
      untilEmpty: true,
    });
    expect(result).toMatchObject({ published: 4, deadLettered: 1 });
    expect(h.bus.events.filter((e) => meta(e).aggregateId === 'p').map((e) => meta(e).sequence)).toEqual([
      1, 3, 4,
    ]);
  });

  it('block: the aggregate waits behind its dead letter; other aggregates go on', async () => {
    await seedWithPoison();
    const settings = testSettings({ deadLetterPolicy: 'block' });
    const client = testClient(h.bus.url);
    for (let i = 0; i < 4; i++) await relayOnce({ sql: h.db.sql, client, settings });
    expect(h.bus.events.map((e) => `${meta(e).aggregateId}${meta(e).sequence}`).sort()).toEqual([
      'other1',
      'p1',
    ]);
    const state = await h.db.sql<{ sequence: string; dead: boolean; published: boolean; attempts: number }[]>`
      select sequence, dead_lettered_at is not null as dead, published_at is not null as published, attempts
      from outbox where aggregate_id = 'p' order by sequence`;
    expect(state.map((r) => [r.sequence, r.dead, r.published, r.attempts])).toEqual([
      ['1', false, true, 1],
      ['2', true, false, 1],
      ['3', false, false, 0], // never claimed: nothing is burnt while the aggregate is blocked
      ['4', false, false, 0],
    ]);
  });
});
