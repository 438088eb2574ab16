/**
 * Issue 35 end to end: a producer enqueues events over many aggregates → the relay (its real code,
 * through its EventsV2 client over HTTP) → the local Custom Event Bus with injected faults (lost
 * answers, so the relay re-sends; throttles; 500s) and relays that crash after the bus accepted
 * (another takes over once their leases expired) → a local subscriber (shared/local/subscriber.ts)
 * → a `wait-for-gap` inbox handler on real Postgres, whose invocations fail now and then (before
 * the inbox, or after it committed, as a lost answer), so that the subscriber retries.
 *
 * FIFO: each aggregate's events applied exactly once and in order, each published event delivered
 * once (the bus dropped the relay's re-sends inside its dedup window), every row published, and the
 * inbox never waited for a gap nor parked an event. The same traffic UNORDERED: the inbox waits
 * (InboxGapError) and may park, which shows the FIFO figures could have failed. Both print their
 * figures (docs/buses.md#what-a-fifo-subscriber-changes-for-the-inbox). After the FIFO run a replay of
 * the bus (POINT_IN_TIME, WITH_METADATA) reaches the inbox marked REPLAY: every event a duplicate.
 */
import type { EventBridgeEvent } from 'aws-lambda';
import { beforeAll, describe, expect, it } from 'vitest';
import { type InboxOptions, inbox } from '../../shared/consumer/index.ts';
import { type LocalSubscriber, startSubscriber } from '../../shared/local/subscriber.ts';
import { enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';
import { createEventsV2Client, eventsV2Publisher } from '../../shared/relay/buses/custom-event-bus.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { Lease } from '../../shared/relay/lease.ts';
import { relayPass } from '../../shared/relay/pass.ts';
import { useHarness } from '../support/harness.ts';
import { lambdaContext } from '../support/lambda.ts';
import { testSettings } from '../support/relay.ts';

const h = useHarness({
  max: 12,
  truncate:
    'outbox, outbox_aggregate, outbox_idempotency_key, inbox_message, inbox_aggregate, inbox_gap, inbox_failed, applied',
});

const ARN = 'arn:aws:events:eu-west-1:123456789012:event-busv2/orders/e2e';
const AGGREGATES = 40;
/** Events per aggregate: the first 4 before the relays start, 2 more while they run. */
const FIRST = 4;
const PER_AGGREGATE = 6;
const TOTAL = AGGREGATES * PER_AGGREGATE;

beforeAll(async () => {
  await h.db.sql`create table applied (id bigserial primary key, event_id text not null,
    aggregate_id text not null, sequence int not null)`;
});

const settings = (overrides = {}) =>
  testSettings({
    eventBusName: ARN,
    eventBusArn: ARN,
    maxAttempts: 100,
    backoffBaseMs: 5,
    backoffMaxMs: 20,
    ...overrides,
  });

const publisher = (s = settings()) =>
  eventsV2Publisher(
    createEventsV2Client({
      endpoint: h.bus.url,
      region: 'eu-west-1',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      maxAttempts: 1,
    }),
    s,
  );

const ev = (aggregate: number, n: number): OutboxEvent => ({
  type: 'LedgerEntry',
  source: 'shop.ledger',
  aggregateType: 'account',
  aggregateId: `a-${aggregate}`,
  payload: { n },
});

/** Events n of every aggregate, for n in [from, to], committed interleaved in `chunks` transactions. */
async function produce(from: number, to: number, chunks: number) {
  const events: OutboxEvent[] = [];
  for (let n = from; n <= to; n++) for (let a = 0; a < AGGREGATES; a++) events.push(ev(a, n));
  const size = Math.ceil(events.length / chunks);
  for (let i = 0; i < events.length; i += size) {
    await h.db.sql.begin((tx) => enqueueMany(tx, events.slice(i, i + size)));
  }
}

/** A relay pass that dies once its `round`th round was accepted by the bus, before marking it. */
async function crashAfterAccepted(round: number) {
  const crash = new Error('relay killed');
  let rounds = 0;
  const failure = await relayPass(
    { sql: h.db.sql, publisher: publisher(), settings: settings({ batchSize: 24 }) },
    new Lease(30),
    {
      checkpoint: async (at) => {
        if (at === 'sent' && ++rounds === round) throw crash;
      },
    },
  ).catch((error: unknown) => error);
  expect(failure).toBe(crash);
}

/** The inbox handler of the consumer `ledger`: its effect is a row in `applied`. */
const ledgerHandler = (metrics: InboxOptions<Record<string, unknown>>['metrics']) =>
  inbox(
    {
      sql: h.db.sql,
      consumer: 'ledger',
      order: 'wait-for-gap',
      gapWaitSeconds: 2,
      onGapTimeout: 'park',
      retryWindowSeconds: 60,
      maxEventAgeSeconds: 60,
      metrics,
    },
    async (_event, { inbox: i }) => {
      await i.tx`insert into applied (event_id, aggregate_id, sequence)
        values (${i.metadata.eventId}, ${i.metadata.aggregateId}, ${Number(i.metadata.sequence)})`;
    },
  );

/** The inbox consumer, and the deterministic faults of its invocations. */
function ledger() {
  const attempts = new Map<string, number>();
  let lostAnswers = 0;
  let failedBefore = 0;
  let duplicates = 0;
  const handler = ledgerHandler(false);
  const target = async (event: unknown) => {
    const e = event as EventBridgeEvent<string, { metadata: { aggregateId: string; sequence: number } }>;
    const { aggregateId, sequence } = e.detail.metadata;
    const key = `${aggregateId}#${sequence}`;
    const attempt = (attempts.get(key) ?? 0) + 1;
    attempts.set(key, attempt);
    const n = Number(aggregateId.slice(2));
    // First attempts of some events fail before the inbox runs (a cold start that timed out)…
    if (attempt === 1 && (n * 7 + sequence) % 11 === 0) {
      failedBefore++;
      throw new Error('function failed before the inbox');
    }
    const result = await handler(e, lambdaContext(6_000));
    if ((result as { inbox?: string } | undefined)?.inbox === 'duplicate') duplicates++;
    // …and of others after it committed: the answer lost, the retry finds a duplicate.
    if (attempt === 1 && (n * 5 + sequence) % 13 === 0) {
      lostAnswers++;
      throw new Error('answer lost after the commit');
    }
    return result;
  };
  return { target, figures: () => ({ failedBefore, lostAnswers, inboxDuplicates: duplicates }) };
}

interface Figures {
  type: 'FIFO' | 'UNORDERED';
  published: number;
  busAccepted: number;
  busDeduplicated: number;
  busRequests: number;
  busLostAnswers: number;
  busThrottlesAnd500s: number;
  subscriberCalls: number;
  delivered: number;
  duplicatesDelivered: number;
  inboxApplied: number;
  /** Deliveries the inbox acknowledged as duplicates (the retries after a lost answer). */
  inboxDuplicates: number;
  waits: number;
  parked: number;
  maxInFlightPerGroup: number;
  failedBefore: number;
  lostAnswers: number;
  ms: number;
}

/** The whole path once, with the subscriber of `type`; returns what it counted. */
async function scenario(
  type: 'FIFO' | 'UNORDERED',
): Promise<{ figures: Figures; subscriber: LocalSubscriber }> {
  const started = Date.now();
  const consumer = ledger();
  const subscriber = startSubscriber({
    bus: h.bus,
    eventBusArn: ARN,
    type,
    target: consumer.target,
    retryPolicy: { maxRetryAttempts: 185, maxEventAgeSeconds: 60 },
    retryDelayMs: (n) => Math.min(200, 10 * 2 ** (n - 1)),
    concurrency: 12,
    jitterMs: 250,
    seed: 35,
  });
  try {
    await produce(1, FIRST, 4);
    // Two relays die after the bus accepted a round, before marking it: their rows stay leased.
    await crashAfterAccepted(1);
    await crashAfterAccepted(2);
    // Their leases run out (database clock); the next relay takes the rows over, through faults,
    // while the producer commits the rest.
    await h.db
      .sql`update outbox set lease_expires_at = now() - interval '1 second' where lease_token is not null`;
    h.bus.setFaults({ lostResponseRate: 0.25, throttleRate: 0.1, serverErrorRate: 0.1 });
    // Small requests (about 10 entries), so that many of them meet the faults.
    const small = settings({ maxRequestBytes: 4096 });
    const deps = { sql: h.db.sql, publisher: publisher(small), settings: small, untilEmpty: true };
    await Promise.all([runRelay(deps), produce(FIRST + 1, PER_AGGREGATE, 8)]);
    await runRelay(deps);
    h.bus.setFaults({});
    await subscriber.idle(25_000);
  } finally {
    await subscriber.close();
  }

  const [rows] = await h.db.sql<{ published: number; total: number }[]>`
    select count(*) filter (where published_at is not null)::int as published, count(*)::int as total from outbox`;
  const [inboxRows] = await h.db.sql<{ applied: number; parked: number }[]>`
    select count(*) filter (where outcome is distinct from 'parked')::int as applied,
           count(*) filter (where outcome = 'parked')::int as parked
    from inbox_message where consumer = 'ledger'`;
  const ok = subscriber.calls.filter((c) => c.ok);
  const perEvent = new Map<string, number>();
  for (const c of ok) perEvent.set(c.eventId, (perEvent.get(c.eventId) ?? 0) + 1);
  const consumerFigures = consumer.figures();
  const figures: Figures = {
    type,
    published: rows?.published ?? 0,
    busAccepted: h.bus.events.length,
    busDeduplicated: h.bus.stats.deduplicated,
    busRequests: h.bus.stats.requests,
    busLostAnswers: h.bus.stats.lostResponses,
    busThrottlesAnd500s: h.bus.stats.throttled + h.bus.stats.serverErrors,
    subscriberCalls: subscriber.stats.attempts,
    delivered: subscriber.stats.delivered,
    duplicatesDelivered: [...perEvent.values()].filter((n) => n > 1).length,
    inboxApplied: inboxRows?.applied ?? 0,
    waits: subscriber.calls.filter((c) => c.error === 'InboxGapError').length,
    parked: inboxRows?.parked ?? 0,
    maxInFlightPerGroup: subscriber.stats.maxInFlightPerGroup,
    ...consumerFigures,
    ms: Date.now() - started,
  };
  console.log(`eventsv2 e2e, ${type}: ${JSON.stringify(figures)}`);
  expect(rows?.total).toBe(TOTAL);
  return { figures, subscriber };
}

/** aggregate → the sequences the handler applied, in the order it applied them. */
async function appliedByAggregate() {
  const rows = await h.db.sql<{ aggregate_id: string; sequence: number; event_id: string }[]>`
    select aggregate_id, sequence, event_id from applied order by id`;
  const by = new Map<string, number[]>();
  for (const r of rows) by.set(r.aggregate_id, [...(by.get(r.aggregate_id) ?? []), r.sequence]);
  return { rows, by };
}

const ONE_TO_N = Array.from({ length: PER_AGGREGATE }, (_, i) => i + 1);

describe('relay → Custom Event Bus → FIFO subscriber → inbox, through faults and crashed relays', () => {
  it('FIFO: every event applied exactly once and in order, none delivered twice, every row published, no gap waits or parks', async () => {
    const { figures, subscriber } = await scenario('FIFO');
    // The faults and crashes happened: re-sends reached the bus and were dropped there.
    expect(figures.busLostAnswers).toBeGreaterThan(0);
    expect(figures.busDeduplicated).toBeGreaterThan(0);
    expect(figures.busThrottlesAnd500s).toBeGreaterThan(0);
    expect(figures.failedBefore).toBeGreaterThan(0);
    expect(figures.lostAnswers).toBeGreaterThan(0);
    // Each retry after an answer lost past the commit found the event applied.
    expect(figures.inboxDuplicates).toBe(figures.lostAnswers);
    // Every row published; the bus kept each event once; each delivered once.
    expect(figures.published).toBe(TOTAL);
    expect(figures.busAccepted).toBe(TOTAL);
    expect(new Set(h.bus.events.map((e) => (e.detail.metadata as { eventId: string }).eventId)).size).toBe(
      TOTAL,
    );
    expect(figures.delivered).toBe(TOTAL);
    expect(figures.duplicatesDelivered).toBe(0);
    expect(figures.maxInFlightPerGroup).toBe(1);
    // The handler: each aggregate 1..6 in order, each event once.
    const { rows, by } = await appliedByAggregate();
    expect(rows).toHaveLength(TOTAL);
    expect(new Set(rows.map((r) => r.event_id)).size).toBe(TOTAL);
    expect(by.size).toBe(AGGREGATES);
    for (const sequences of by.values()) expect(sequences).toEqual(ONE_TO_N);
    // FIFO: the inbox never waited for a gap, nor parked anything.
    expect(figures.waits).toBe(0);
    expect(figures.parked).toBe(0);
    expect(figures.inboxApplied).toBe(TOTAL);
    // Deliveries followed the bus's sequence numbers within each group.
    const byGroup = new Map<string, bigint[]>();
    for (const c of subscriber.calls.filter((x) => x.ok))
      byGroup.set(c.eventGroupId ?? '', [
        ...(byGroup.get(c.eventGroupId ?? '') ?? []),
        BigInt(c.sequenceNumber),
      ]);
    for (const seqs of byGroup.values())
      expect(seqs).toEqual([...seqs].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));

    // A replay of the bus's whole retention (POINT_IN_TIME, WITH_METADATA, FIFO): every event
    // reaches the inbox again, marked REPLAY, and is acknowledged as a duplicate; nothing applied twice.
    const lines: Record<string, unknown>[] = [];
    const replayHandler = ledgerHandler({ write: (line) => lines.push(JSON.parse(line)) });
    const answers: unknown[] = [];
    const replay = startSubscriber({
      bus: h.bus,
      eventBusArn: ARN,
      type: 'FIFO',
      transformer: 'WITH_METADATA',
      startingPosition: { pointInTime: 0 },
      target: async (e) => answers.push(await replayHandler(e as never, lambdaContext(6_000))),
    });
    await replay.idle(25_000);
    await replay.close();
    expect(replay.stats).toMatchObject({ delivered: TOTAL, replayed: TOTAL, failed: 0 });
    expect(answers).toHaveLength(TOTAL);
    expect(
      answers.every(
        (a) =>
          (a as { inbox?: string; replay?: boolean }).inbox === 'duplicate' &&
          (a as { replay?: boolean }).replay === true,
      ),
    ).toBe(true);
    expect(lines.filter((l) => l.InboxBusReplay === 1 && l.outcome === 'duplicate')).toHaveLength(TOTAL);
    expect((await appliedByAggregate()).rows).toHaveLength(TOTAL);
  });

  it('the same traffic UNORDERED: the wait-for-gap inbox waits (and may park), so the FIFO figures can fail', async () => {
    const { figures } = await scenario('UNORDERED');
    expect(figures.published).toBe(TOTAL);
    expect(figures.duplicatesDelivered).toBe(0);
    expect(figures.maxInFlightPerGroup).toBeGreaterThan(1);
    expect(figures.waits + figures.parked).toBeGreaterThan(0);
    // Still never applied twice: each event applied once or parked.
    const { rows } = await appliedByAggregate();
    expect(new Set(rows.map((r) => r.event_id)).size).toBe(rows.length);
    expect(rows.length + figures.parked).toBe(TOTAL);
  });
});
