/**
 * Issue 35: the relay → the Custom Event Bus (EventsV2) of the local bus, through the relay's own
 * EventsV2 client over HTTP. A FIFO subscriber of each aggregate's group receives its events in
 * order, through lost answers (the relay re-sends) and a relay that crashed after the bus accepted,
 * with no duplicate delivered inside the dedup window; the configuration that selects it.
 */
import { describe, expect, it } from 'vitest';
import { type AcceptedEvent, fifoDeliveries } from '../../shared/local/bus.ts';
import { loadRelaySettings, OutboxConfigError } from '../../shared/platform/index.ts';
import { enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';
import {
  createEventsV2Client,
  EVENTSV2_MAX_ENTRIES_PER_REQUEST,
  eventGroupIdOf,
  eventsV2Publisher,
  MAX_EVENT_GROUP_ID_LENGTH,
} from '../../shared/relay/buses/custom-event-bus.ts';
import { createRelay, runRelay } from '../../shared/relay/index.ts';
import { Lease } from '../../shared/relay/lease.ts';
import { relayPass } from '../../shared/relay/pass.ts';
import { useHarness } from '../support/harness.ts';
import { testSettings } from '../support/relay.ts';

const h = useHarness({ max: 8 });

const ARN = 'arn:aws:events:eu-west-1:123456789012:event-busv2/orders/abc123';

const v2Settings = (overrides = {}) => testSettings({ eventBusName: ARN, eventBusArn: ARN, ...overrides });

const publisher = (options: { maxAttempts?: number } = {}, settings = v2Settings()) =>
  eventsV2Publisher(
    createEventsV2Client({
      endpoint: h.bus.url,
      region: 'eu-west-1',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      maxAttempts: options.maxAttempts ?? 3,
    }),
    settings,
  );

const ev = (aggregateId: string, n: number, aggregateType = 'order'): OutboxEvent => ({
  type: 'OrderChanged',
  source: 'shop.orders',
  aggregateType,
  aggregateId,
  payload: { n },
});

/** `perAggregate` events for each of `aggregates` aggregates, committed interleaved. */
async function seed(aggregates: number, perAggregate: number) {
  const events: OutboxEvent[] = [];
  for (let n = 1; n <= perAggregate; n++) for (let a = 0; a < aggregates; a++) events.push(ev(`o-${a}`, n));
  await h.db.sql.begin((tx) => enqueueMany(tx, events));
  return events.length;
}

const meta = (e: AcceptedEvent) =>
  e.detail.metadata as { eventId: string; aggregateId: string; sequence: number };

/** What a FIFO subscriber of each group received: aggregate → the sequences, in delivery order. */
function fifoByGroup(events: readonly AcceptedEvent[]): Map<string, number[]> {
  const groups = new Set(events.map((e) => e.eventGroupId as string));
  return new Map([...groups].map((g) => [g, fifoDeliveries(events, g, ARN).map((e) => meta(e).sequence)]));
}

async function rowStates() {
  const [row] = await h.db.sql<{ published: number; dead: number; leased: number; total: number }[]>`
    select count(*) filter (where published_at is not null)::int as published,
           count(*) filter (where dead_lettered_at is not null)::int as dead,
           count(*) filter (where lease_token is not null)::int as leased,
           count(*)::int as total
    from outbox`;
  return row;
}

describe('the relay on a Custom Event Bus', () => {
  it('puts each event once, in order per aggregate group, through lost answers and faults (re-sends are DEDUPLICATED)', async () => {
    const total = await seed(30, 8);
    h.bus.setFaults({
      lostResponseRate: 0.25,
      throttleRate: 0.05,
      serverErrorRate: 0.05,
      entryFailureRate: 0.05,
    });
    const result = await runRelay({
      sql: h.db.sql,
      publisher: publisher({ maxAttempts: 1 }),
      settings: v2Settings({ maxAttempts: 100, backoffBaseMs: 5, backoffMaxMs: 20 }),
      untilEmpty: true,
    });
    // The faults happened, and re-sends after lost answers reached the bus and were dropped there.
    expect(h.bus.stats.lostResponses).toBeGreaterThan(0);
    expect(h.bus.stats.deduplicated).toBeGreaterThan(0);
    // Delivered: every event exactly once, on the bus by ARN, grouped by aggregate, deduplicated by event id.
    const ids = h.bus.events.map((e) => meta(e).eventId);
    expect(new Set(ids).size).toBe(total);
    expect(ids).toHaveLength(total);
    for (const e of h.bus.events) {
      expect(e.eventBusName).toBe(ARN);
      expect(e.eventGroupId).toBe(`order/${meta(e).aggregateId}`);
      expect(e.deduplicationId).toBe(meta(e).eventId);
    }
    // A FIFO subscriber of each group receives 1..8 in order.
    const byGroup = fifoByGroup(h.bus.events);
    expect(byGroup.size).toBe(30);
    for (const sequences of byGroup.values()) expect(sequences).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    // Rows: all published (a DEDUPLICATED answer counts as published), none dead or leased.
    expect(await rowStates()).toEqual({ published: total, dead: 0, leased: 0, total });
    expect(result.published).toBe(total);
  });

  it('a relay that crashed after the bus accepted: the next relay re-sends, the bus drops the copies, rows are marked', async () => {
    const total = await seed(5, 3);
    const deps = { sql: h.db.sql, publisher: publisher(), settings: v2Settings() };
    // The first relay's round 1 is accepted by the bus; it dies before marking anything.
    const crash = new Error('relay killed');
    const failure = await relayPass(deps, new Lease(30), {
      checkpoint: async (at) => {
        if (at === 'sent') throw crash;
      },
    }).catch((error: unknown) => error);
    expect(failure).toBe(crash);
    expect(h.bus.events.map((e) => meta(e).sequence)).toEqual([1, 1, 1, 1, 1]);
    expect((await rowStates())?.published).toBe(0);
    // Its lease runs out (database clock), and another relay takes the rows.
    await h.db
      .sql`update outbox set lease_expires_at = now() - interval '1 second' where lease_token is not null`;
    await runRelay({ ...deps, untilEmpty: true });
    expect(h.bus.stats.deduplicated).toBe(5);
    expect(h.bus.events).toHaveLength(total);
    for (const sequences of fifoByGroup(h.bus.events).values()) expect(sequences).toEqual([1, 2, 3]);
    expect(await rowStates()).toEqual({ published: total, dead: 0, leased: 0, total });
  });

  it('packs up to 100 entries per request', async () => {
    const total = await seed(250, 1);
    const counts = await runRelay({
      sql: h.db.sql,
      publisher: publisher(),
      settings: v2Settings({ batchSize: 250, pipelineDepth: 1 }),
      untilEmpty: true,
    });
    expect(h.bus.stats.maxEntriesPerRequest).toBe(EVENTSV2_MAX_ENTRIES_PER_REQUEST);
    expect(counts.putEventsCalls).toBe(3);
    expect(h.bus.events).toHaveLength(total);
  });

  it('dead-letters an entry the bus refuses for good and retries none of it', async () => {
    await h.db.sql.begin((tx) => enqueueMany(tx, [ev('p', 1), ev('q', 1)]));
    h.bus.setFaults({ poisonMarker: '"aggregateId":"p"', poisonCode: 'MalformedDetail' });
    await runRelay({ sql: h.db.sql, publisher: publisher(), settings: v2Settings(), untilEmpty: true });
    const rows = await h.db.sql<
      { aggregate_id: string; dead: boolean; published: boolean; last_error: string }[]
    >`
      select aggregate_id, dead_lettered_at is not null as dead, published_at is not null as published, last_error
      from outbox order by aggregate_id`;
    expect(rows.map((r) => [r.aggregate_id, r.dead, r.published])).toEqual([
      ['p', true, false],
      ['q', false, true],
    ]);
    expect(rows[0]?.last_error).toMatch(/^MalformedDetail/);
    expect(h.bus.events.map((e) => meta(e).aggregateId)).toEqual(['q']);
  });

  it('groups an aggregate whose key is longer than 128 characters under a stable hash', async () => {
    const longId = 'x'.repeat(200);
    await h.db.sql.begin((tx) => enqueueMany(tx, [ev(longId, 1), ev(longId, 2)]));
    await runRelay({ sql: h.db.sql, publisher: publisher(), settings: v2Settings(), untilEmpty: true });
    const group = eventGroupIdOf({ aggregateType: 'order', aggregateId: longId });
    expect(group).toMatch(/^sha256:[0-9a-f]{64}$/);
    expect(group.length).toBeLessThanOrEqual(MAX_EVENT_GROUP_ID_LENGTH);
    expect(h.bus.events.map((e) => e.eventGroupId)).toEqual([group, group]);
    expect(fifoDeliveries(h.bus.events, group).map((e) => meta(e).sequence)).toEqual([1, 2]);
  });

  it('is what createRelay builds when OUTBOX_EVENT_BUS_ARN is set', async () => {
    const total = await seed(3, 2);
    const relay = createRelay({
      env: { OUTBOX_EVENT_BUS_ARN: ARN, OUTBOX_POLL_INTERVAL_MS: '20' },
      sql: h.db.sql,
      eventsV2ClientConfig: {
        endpoint: h.bus.url,
        region: 'eu-west-1',
        credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      },
    });
    expect(relay.publisher.kind).toBe('custom-event-bus');
    expect(relay.client).toBeUndefined();
    await relay.run({ untilEmpty: true });
    await relay.close();
    expect(h.bus.events.map((e) => [e.eventBusName, e.sequenceNumber !== undefined])).toEqual(
      Array.from({ length: total }, () => [ARN, true]),
    );
    expect((await rowStates())?.published).toBe(total);
  });
});

describe('OUTBOX_EVENT_BUS_ARN', () => {
  it('selects the Custom Event Bus; unset, the classic bus stays the default', () => {
    expect(loadRelaySettings({ OUTBOX_EVENT_BUS_ARN: ARN })).toMatchObject({
      eventBusArn: ARN,
      eventBusName: ARN,
    });
    const classic = loadRelaySettings({ EVENT_BUS_NAME: 'orders' });
    expect(classic.eventBusName).toBe('orders');
    expect(classic.eventBusArn).toBeUndefined();
  });

  it.each([
    [
      { OUTBOX_EVENT_BUS_ARN: 'arn:aws:events:eu-west-1:123456789012:event-bus/orders' },
      /^OUTBOX_EVENT_BUS_ARN: must be a Custom Event Bus ARN/,
    ],
    [
      { OUTBOX_EVENT_BUS_ARN: ARN, EVENT_BUS_NAME: 'orders' },
      /^OUTBOX_EVENT_BUS_ARN: is set beside EVENT_BUS_NAME, and the relay publishes to one bus/,
    ],
    [
      { EVENT_BUS_NAME: ARN },
      /^EVENT_BUS_NAME: names a Custom Event Bus \(EventsV2\): set OUTBOX_EVENT_BUS_ARN/,
    ],
    [{ OUTBOX_EVENT_BUS_ARN: ARN, OUTBOX_BATCH_SIZE: 'abc' }, /^OUTBOX_BATCH_SIZE: must be a whole number/],
  ])('refuses %o with a typed error naming the variable', (env, message) => {
    let caught: unknown;
    try {
      loadRelaySettings(env);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(OutboxConfigError);
    expect((caught as Error).message).toMatch(message);
  });
});
