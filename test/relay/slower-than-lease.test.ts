/**
 * A bus slower than any lease allows (issue 48): an attempt that waited the answer timeout's
 * ceiling without an answer spends the entries' attempt, so they dead-letter after
 * OUTBOX_MAX_ATTEMPTS instead of being re-sent as back-pressure without end.
 */
import { describe, expect, it } from 'vitest';
import { enqueueMany } from '../../shared/producer/index.ts';
import { AnswerTimeout } from '../../shared/relay/answer-timeout.ts';
import { createEventsV2Client, eventsV2Publisher } from '../../shared/relay/buses/custom-event-bus.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { relayAnswerTimeout } from '../../shared/relay/pass.ts';
import { maxCallMs } from '../../shared/relay/pass-deadlines.ts';
import { useHarness } from '../support/harness.ts';
import { testClient, testSettings } from '../support/relay.ts';

const h = useHarness({ max: 6 });
const V2_ARN = 'arn:aws:events:eu-west-1:123456789012:event-busv2/orders/abc123';

/** One pending event of aggregate order/o-1. */
async function enqueueOne() {
  await h.db.sql.begin((tx) =>
    enqueueMany(tx, [
      { type: 'OrderPlaced', source: 'shop.orders', aggregateType: 'order', aggregateId: 'o-1', payload: {} },
    ]),
  );
}

async function rows() {
  return h.db.sql<{ attempts: number; dead: boolean; last_error: string | null }[]>`
    select attempts, dead_lettered_at is not null as dead, last_error from outbox`;
}

describe('a bus slower than the lease allows', () => {
  it('sets the longest call from the lease: 10 s up to a 13 s lease, the lease less 3 s above', () => {
    expect(maxCallMs(8)).toBe(10_000);
    expect(maxCallMs(13)).toBe(10_000);
    expect(maxCallMs(30)).toBe(27_000);
  });

  it('dead-letters the events after their attempts, each sent at most once per attempt', async () => {
    await h.db.sql.begin((tx) =>
      enqueueMany(
        tx,
        Array.from({ length: 4 }, (_, i) => ({
          type: 'OrderPlaced',
          source: 'shop.orders',
          aggregateType: 'order',
          aggregateId: `o-${i}`,
          payload: { i },
        })),
      ),
    );
    // The ceiling stands for the longest wait a lease allows (1 s here, 27 s at a 30 s lease).
    h.bus.setFaults({ latencyMs: 1_500 });
    const result = await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url, { maxAttempts: 1 }),
      settings: testSettings({ maxAttempts: 2, pipelineDepth: 1 }),
      answerTimeout: new AnswerTimeout({ ceilingMs: 1_000 }),
      untilEmpty: true,
      signal: AbortSignal.timeout(60_000),
    });
    h.bus.setFaults({});
    expect(result.stopReason).toBe('empty');
    expect(result.deadLettered).toBe(4);
    expect(result.published).toBe(0);
    const rows = await h.db.sql<{ attempts: number; last_error: string }[]>`
      select attempts, last_error from outbox where dead_lettered_at is not null order by id`;
    expect(rows).toHaveLength(4);
    for (const r of rows) {
      expect(r.attempts).toBe(2);
      expect(r.last_error).toMatch(
        /^PutEventsTimeoutError: no answer from the bus within 1000 ms, the longest/,
      );
    }
    // Requests still held by the bus land after its latency: at most one per attempt.
    await new Promise((r) => setTimeout(r, 1_800));
    expect(h.bus.events.length).toBeLessThanOrEqual(8);
  }, 90_000);

  // The breaker's find (issue 48): in Lambda the invocation's remaining time caps each call, and a
  // lease whose ceiling (27 s at 30 s) no call of a 25 s invocation can reach left a bus that never
  // answers as back-pressure for ever: attempts 0, never dead-lettered.
  it('dead-letters for a bus that never answers when the invocation, not the lease, caps every call', async () => {
    await enqueueOne();
    h.bus.setFaults({ latencyMs: 120_000 });
    // One answer timeout across invocations, as the Lambda handler keeps its relay.
    const answerTimeout = relayAnswerTimeout({ leaseSeconds: 30 });
    const client = testClient(h.bus.url, { maxAttempts: 1 });
    let dead = 0;
    for (let invocation = 0; invocation < 3 && dead === 0; invocation++) {
      const until = performance.now() + 25_000;
      const result = await runRelay({
        sql: h.db.sql,
        client,
        settings: testSettings({ leaseSeconds: 30, maxAttempts: 1, pipelineDepth: 1 }),
        answerTimeout,
        remainingMs: () => until - performance.now(),
      });
      dead += result.deadLettered;
    }
    h.bus.setFaults({});
    const [row] = await rows();
    expect(dead).toBe(1);
    expect(row?.dead).toBe(true);
    expect(row?.attempts).toBe(1);
    expect(row?.last_error).toMatch(
      /^PutEventsTimeoutError: no answer from the bus within \d+ ms, all the invocation left/,
    );
  }, 120_000);

  // The breaker's other find: the SDK retries a 5xx inside the call, and when the call's budget
  // cut that retry off, the pass took the abort for a bus that never answered and spent the
  // entries' attempt (dead-lettered after 2, "raise the lease"). A bus answering 500 is an outage:
  // back-pressure, the attempt given back.
  it.each(['classic', 'custom'] as const)(
    'gives the attempt back when the %s bus answered 500 and the budget cut the SDK retry off',
    async (busKind) => {
      await enqueueOne();
      h.bus.setFaults({ latencyMs: 6_000, serverErrorRate: 1 });
      const settings = testSettings({
        leaseSeconds: 8,
        maxAttempts: 2,
        pipelineDepth: 1,
        ...(busKind === 'custom' ? { eventBusName: V2_ARN, eventBusArn: V2_ARN } : {}),
      });
      const result = await runRelay({
        sql: h.db.sql,
        ...(busKind === 'custom'
          ? {
              publisher: eventsV2Publisher(
                createEventsV2Client({
                  endpoint: h.bus.url,
                  region: 'eu-west-1',
                  credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
                  maxAttempts: 3,
                }),
                settings,
              ),
            }
          : { client: testClient(h.bus.url, { maxAttempts: 3 }) }),
        settings,
        signal: AbortSignal.timeout(30_000),
      });
      h.bus.setFaults({});
      const [row] = await rows();
      expect(result.backPressure).toBeGreaterThan(0);
      expect(result.deadLettered).toBe(0);
      expect(row?.dead).toBe(false);
      expect(row?.attempts).toBe(0);
    },
    60_000,
  );
});
