import { randomUUID } from 'node:crypto';
import { afterEach, describe, expect, it } from 'vitest';
import { startLocalBus } from '../../shared/local/bus.ts';
import type { Envelope } from '../../shared/platform/envelope.ts';
import { enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { relayOnce } from '../../shared/relay/loop.ts';
import { abandonLease, claimBatch, markPublished, recordFailures } from '../../shared/relay/sql/index.ts';
import { useHarness } from '../support/harness.ts';
import { claimOptions, testClient, testSettings } from '../support/relay.ts';

const h = useHarness({ max: 12 });
afterEach(() => h.bus.setFaults({}));

const order = (aggregateId: string, payload: Record<string, unknown> = { total: 1 }): OutboxEvent => ({
  type: 'OrderPlaced',
  source: 'shop.orders',
  aggregateType: 'order',
  aggregateId,
  payload,
});

async function seed(events: OutboxEvent[]) {
  const chunk = 1_000;
  for (let i = 0; i < events.length; i += chunk) {
    await h.db.sql.begin((tx) => enqueueMany(tx, events.slice(i, i + chunk)));
  }
}

const rows = () =>
  h.db.sql<
    {
      event_id: string;
      published_at: Date | null;
      dead_lettered_at: Date | null;
      attempts: number;
      last_error: string | null;
      lease_token: string | null;
    }[]
  >`
    select event_id, published_at, dead_lettered_at, attempts, last_error, lease_token from outbox order by id`;

/** Moves every lease's expiry into the past, as if the lease length had elapsed. */
const expireLeases = () =>
  h.db.sql`update outbox set lease_expires_at = now() - interval '1 second' where lease_token is not null`;

describe('relay', () => {
  it('puts the envelope docs/producing.md describes on the bus', async () => {
    await h.db.sql.begin((tx) =>
      enqueueMany(tx, [
        {
          ...order('8842', { total: 12.5, note: 'naïve ☕' }),
          traceHeader: 'Root=1-5759e988-bd862e3fe1be46a994272793',
        },
      ]),
    );
    const [stored] = await h.db.sql<
      { event_id: string; created_at: Date }[]
    >`select event_id, created_at from outbox`;
    const [identity] = await h.db.sql<{ outbox_id: string }[]>`select outbox_id::text from outbox_identity`;
    await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings: testSettings({ eventBusName: 'orders-bus' }),
      untilEmpty: true,
    });
    expect(h.bus.events).toHaveLength(1);
    const e = h.bus.events[0];
    expect(e).toMatchObject({
      eventBusName: 'orders-bus',
      source: 'shop.orders',
      detailType: 'OrderPlaced',
      traceHeader: 'Root=1-5759e988-bd862e3fe1be46a994272793',
    });
    expect(Math.abs(Date.parse(e?.time ?? '') - (stored?.created_at.getTime() ?? 0))).toBeLessThan(1_000);
    expect(e?.detail).toEqual({
      metadata: {
        eventId: stored?.event_id,
        aggregateType: 'order',
        aggregateId: '8842',
        sequence: 1,
        typeSequence: 1,
        occurredAt: stored?.created_at.toISOString(),
        // the outbox that numbered it (migration 031): consumers keep a chain per outbox
        outboxId: identity?.outbox_id,
      },
      data: { total: 12.5, note: 'naïve ☕' },
    });
    const [row] = await rows();
    expect(row?.published_at).toBeInstanceOf(Date);
    expect(row?.lease_token).toBeNull();
  });

  it('publishes nothing of a rolled-back transaction', async () => {
    await h.db.sql
      .begin(async (tx) => {
        await enqueueMany(tx, [order('rolled-back')]);
        throw new Error('abort');
      })
      .catch(() => {});
    await h.db.sql.begin((tx) => enqueueMany(tx, [order('committed')]));
    await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings: testSettings(),
      untilEmpty: true,
    });
    expect(h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.aggregateId)).toEqual([
      'committed',
    ]);
  });

  it('re-publishes with the same eventId after a crash between publish and mark', async () => {
    await seed([order('1'), order('2')]);
    const client = testClient(h.bus.url);
    // The first relay claims and publishes, then "crashes": its marks never happen.
    const token = randomUUID();
    const claimed = await claimBatch(h.db.sql, claimOptions(token));
    const { putEntries, toEntry } = await import('../../shared/relay/buses/classic-bus.ts');
    await putEntries(
      client,
      claimed.map((e) => toEntry(e, 'test-bus')),
    );
    expect(h.bus.events).toHaveLength(2);
    // Its lease expires; the next relay publishes again.
    await expireLeases();
    const result = await runRelay({ sql: h.db.sql, client, settings: testSettings(), untilEmpty: true });
    expect(result.published).toBe(2);
    expect(h.bus.events).toHaveLength(4);
    const ids = h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.eventId);
    expect(new Set(ids).size).toBe(2);
    expect(ids.slice(2).sort()).toEqual(ids.slice(0, 2).sort());
    expect((await rows()).every((r) => r.published_at !== null)).toBe(true);
  });

  it('publishes each of 10,000 rows exactly once with three relays running at once', async () => {
    await seed(Array.from({ length: 10_000 }, (_, i) => order(String(i % 2_500))));
    const { connect } = await import('../../shared/platform/db.ts');
    const pools = [1, 2, 3].map(() => connect({ url: h.db.url, max: 3, env: {} }));
    try {
      const results = await Promise.all(
        pools.map((sql) =>
          runRelay({
            sql,
            client: testClient(h.bus.url),
            settings: testSettings({ batchSize: 200 }),
            untilEmpty: true,
          }),
        ),
      );
      expect(results.reduce((n, r) => n + r.published, 0)).toBe(10_000);
      expect(results.every((r) => r.published > 0)).toBe(true); // all three took part
    } finally {
      await Promise.all(pools.map((p) => p.end()));
    }
    const ids = h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.eventId);
    expect(ids).toHaveLength(10_000);
    expect(new Set(ids).size).toBe(10_000);
    const [unpublished] = await h.db.sql`select count(*)::int as n from outbox where published_at is null`;
    expect(unpublished?.n).toBe(0);
  });

  it('does not let a relay whose lease expired overwrite the new owner', async () => {
    await seed([order('zombie')]);
    const claim = (leaseToken: string) => claimBatch(h.db.sql, claimOptions(leaseToken));
    const oldToken = randomUUID();
    const [mine] = await claim(oldToken);
    await expireLeases();
    const newToken = randomUUID();
    const [theirs] = await claim(newToken);
    expect(theirs?.id).toBe(mine?.id);
    expect(theirs?.attempts).toBe(2);

    // The zombie's late writes change nothing.
    expect(await markPublished(h.db.sql, oldToken, [mine?.id as string])).toBe(0);
    expect(
      await recordFailures(h.db.sql, oldToken, [
        { id: mine?.id as string, error: 'late', deadLetter: true, retryInMs: 0 },
      ]),
    ).toHaveProperty('size', 0);
    const [row] = await rows();
    expect(row).toMatchObject({
      published_at: null,
      dead_lettered_at: null,
      lease_token: newToken,
      last_error: null,
    });
    // The owner's write lands.
    expect(await markPublished(h.db.sql, newToken, [theirs?.id as string])).toBe(1);
  });

  it("hands a failed pass's lease back without burning attempts, leaving settled rows alone", async () => {
    await seed([order('a'), order('b'), order('c')]);
    const token = randomUUID();
    const claimed = await claimBatch(h.db.sql, claimOptions(token));
    expect(claimed).toHaveLength(3);
    // The pass published one row, then lost its database connection before marking the others.
    await markPublished(h.db.sql, token, [claimed[0]?.id as string]);
    // (handed all three: the published one is left alone)
    const held = claimed.map((e) => e.id);
    expect(await abandonLease(h.db.sql, token, { held, attemptsBefore: [0, 0, 0] })).toHaveProperty(
      'size',
      2,
    );
    const state = await h.db.sql<{ published: boolean; attempts: number; lease_token: string | null }[]>`
      select published_at is not null as published, attempts, lease_token from outbox order by published_at nulls last, id`;
    expect(state).toEqual([
      { published: true, attempts: 1, lease_token: null },
      { published: false, attempts: 0, lease_token: null },
      { published: false, attempts: 0, lease_token: null },
    ]);
    // Claimable again at once, not after the lease would have expired.
    expect(await claimBatch(h.db.sql, claimOptions(randomUUID()))).toHaveLength(2);
  });

  it('dead-letters a row that crashes the relay on every attempt, after max attempts', async () => {
    await seed([order('poison'), order('fine')]);
    const maxAttempts = 3;
    const [poison] = await h.db.sql<{ id: string }[]>`select id from outbox where aggregate_id = 'poison'`;
    // Each "crash": the row is claimed, then the relay dies before recording an outcome.
    for (let i = 0; i < maxAttempts; i++) {
      await claimBatch(h.db.sql, claimOptions(randomUUID(), { batchSize: 1, perAggregateLimit: 1 }));
      await h.db
        .sql`update outbox set lease_expires_at = now() - interval '1 second' where id = ${poison?.id as string}`;
      await h.db.sql`update outbox set attempts = 0, lease_token = null where id <> ${poison?.id as string}`;
    }
    const result = await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings: testSettings({ maxAttempts }),
      untilEmpty: true,
    });
    expect(result.deadLettered).toBe(1);
    const all = await h.db.sql<
      {
        aggregate_id: string;
        dead_lettered_at: Date | null;
        published_at: Date | null;
        attempts: number;
        last_error: string | null;
      }[]
    >`
      select aggregate_id, dead_lettered_at, published_at, attempts, last_error from outbox order by aggregate_id`;
    expect(all[1]).toMatchObject({ aggregate_id: 'poison', published_at: null, attempts: maxAttempts + 1 });
    expect(all[1]?.dead_lettered_at).toBeInstanceOf(Date);
    expect(all[1]?.last_error).toMatch(/^AttemptsExhausted/);
    expect(all[0]?.published_at).toBeInstanceOf(Date);
    expect(h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.aggregateId)).toEqual(['fine']);
  });

  it('marks only the entries that succeeded when PutEvents reports FailedEntryCount > 0', async () => {
    h.bus.setFaults({ poisonMarker: 'refuse-me', poisonCode: 'MalformedDetail' });
    await seed([
      order('a'),
      order('b', { note: 'refuse-me' }),
      order('c'),
      order('d', { note: 'refuse-me' }),
      order('e'),
    ]);
    const result = await relayOnce({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings: testSettings(),
    });
    expect(result).toMatchObject({ published: 3, deadLettered: 2, putEventsCalls: 1 });
    const state = await h.db.sql<
      { aggregate_id: string; published: boolean; dead: boolean; last_error: string | null }[]
    >`
      select aggregate_id, published_at is not null as published, dead_lettered_at is not null as dead, last_error
      from outbox order by aggregate_id`;
    expect(state.map((r) => [r.aggregate_id, r.published, r.dead])).toEqual([
      ['a', true, false],
      ['b', false, true],
      ['c', true, false],
      ['d', false, true],
      ['e', true, false],
    ]);
    expect(state[1]?.last_error).toMatch(/^MalformedDetail: /);
  });

  it('retries an entry that failed with a retryable code, with backoff, and then publishes it', async () => {
    h.bus.setFaults({ poisonMarker: 'fail-me', poisonCode: 'InternalFailure' });
    await seed([order('ok'), order('flaky', { note: 'fail-me' })]);
    const client = testClient(h.bus.url);
    const settings = testSettings({ backoffBaseMs: 60_000, backoffMaxMs: 60_000 });
    const first = await relayOnce({ sql: h.db.sql, client, settings, random: () => 0.5 });
    expect(first).toMatchObject({ published: 1, retried: 1, deadLettered: 0 });
    const [flaky] = await h.db.sql<{ attempts: number; wait: number; last_error: string }[]>`
      select attempts, extract(epoch from available_at - now())::float8 as wait, last_error from outbox where aggregate_id = 'flaky'`;
    expect(flaky?.attempts).toBe(1);
    expect(flaky?.wait).toBeGreaterThan(25); // half of the 60 s ceiling (jitter fixed at 0.5)
    expect(flaky?.wait).toBeLessThan(31);
    expect(flaky?.last_error).toMatch(/^InternalFailure/);
    // Still backing off: not claimed again yet.
    expect((await relayOnce({ sql: h.db.sql, client, settings })).claimed).toBe(0);
    // The bus recovers and the backoff elapses.
    h.bus.setFaults({});
    await h.db.sql`update outbox set available_at = now() where aggregate_id = 'flaky'`;
    const later = await relayOnce({ sql: h.db.sql, client, settings });
    expect(later.published).toBe(1);
  });

  it('never sends more than 10 entries or more bytes than the limit in one request', async () => {
    const limited = await startLocalBus({ maxRequestBytes: 262_144 });
    try {
      // 2-, 3- and 4-byte UTF-8 characters: counting characters instead of bytes would overflow.
      const alphabet = ['é', '日', '🚀', 'a'];
      await seed(
        Array.from({ length: 60 }, (_, i) =>
          order(`big-${i}`, { text: (alphabet[i % 4] as string).repeat(5_000 + ((i * 997) % 20_000)) }),
        ),
      );
      await seed(Array.from({ length: 95 }, (_, i) => order(`small-${i}`)));
      const result = await runRelay({
        sql: h.db.sql,
        client: testClient(limited.url),
        settings: testSettings({ maxRequestBytes: 262_144 }),
        untilEmpty: true,
      });
      expect(result.published).toBe(155);
      expect(limited.stats.rejected).toBe(0);
      expect(limited.stats.maxEntriesPerRequest).toBeLessThanOrEqual(10);
      expect(limited.stats.maxRequestBytes).toBeLessThanOrEqual(262_144);
      expect(limited.events).toHaveLength(155);
    } finally {
      await limited.close();
    }
  });

  it('retries, rather than dead-letters, events refused because the bus name is invalid', async () => {
    await seed([order('a'), order('b'), order('c')]);
    const result = await relayOnce({
      sql: h.db.sql,
      client: testClient(h.bus.url, { maxAttempts: 1 }),
      settings: testSettings({ eventBusName: 'orders bus' }),
    });
    expect(result).toMatchObject({ published: 0, retried: 3, backPressure: 0, deadLettered: 0 });
    const [dead] = await h.db.sql`select count(*)::int as n from outbox where dead_lettered_at is not null`;
    expect(dead?.n).toBe(0);
  });

  it('publishes a payload that jsonb prints larger than enqueue measured (compact JSON on the bus)', async () => {
    const limited = await startLocalBus({ maxRequestBytes: 262_144 });
    try {
      // 200 KB as compact JSON; jsonb's text form adds a space after every comma (300 KB).
      const ids = Array.from({ length: 100_000 }, (_, i) => i % 10);
      await h.db.sql.begin((tx) => enqueueMany(tx, [order('big', { ids })], { maxEntryBytes: 262_144 }));
      const result = await runRelay({
        sql: h.db.sql,
        client: testClient(limited.url),
        settings: testSettings({ maxRequestBytes: 262_144 }),
        untilEmpty: true,
      });
      expect(result).toMatchObject({ published: 1, deadLettered: 0 });
      expect(limited.stats.rejected).toBe(0);
    } finally {
      await limited.close();
    }
  });

  it('backs off a whole request refused by the bus (HTTP 500) without losing rows', async () => {
    h.bus.setFaults({ serverErrorRate: 1 });
    await seed([order('x'), order('y')]);
    const client = testClient(h.bus.url, { maxAttempts: 1 });
    const first = await relayOnce({ sql: h.db.sql, client, settings: testSettings() });
    expect(first).toMatchObject({ published: 0, retried: 2, backPressure: 2 });
    // The service failed, not the events: their attempts are given back.
    expect((await rows()).map((r) => r.attempts)).toEqual([0, 0]);
    h.bus.setFaults({});
    await h.db.sql`update outbox set available_at = now()`;
    const result = await runRelay({ sql: h.db.sql, client, settings: testSettings(), untilEmpty: true });
    expect(result.published).toBe(2);
    expect(h.bus.events).toHaveLength(2);
  });

  it('publishes an event whose response was lost again, with the same eventId', async () => {
    h.bus.setFaults({ lostResponseRate: 1 });
    await seed([order('lost')]);
    const client = testClient(h.bus.url, { maxAttempts: 1 });
    const first = await relayOnce({ sql: h.db.sql, client, settings: testSettings() });
    expect(first).toMatchObject({ published: 0, retried: 1, backPressure: 1 });
    expect(h.bus.events).toHaveLength(1); // it did land
    h.bus.setFaults({});
    await h.db.sql`update outbox set available_at = now()`;
    await runRelay({ sql: h.db.sql, client, settings: testSettings(), untilEmpty: true });
    expect(h.bus.events).toHaveLength(2);
    const [a, b] = h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.eventId);
    expect(a).toBe(b);
    expect(h.bus.events[0]?.id).not.toBe(h.bus.events[1]?.id); // EventBridge's own id differs
  });
});
