/**
 * A bus slower than any lease allows (issue 48): an attempt that waited the answer timeout's
 * ceiling without an answer spends the entries' attempt, so they dead-letter after
 * OUTBOX_MAX_ATTEMPTS instead of being re-sent as back-pressure without end.
 */
import { describe, expect, it } from 'vitest';
import { enqueueMany } from '../../shared/producer/index.ts';
import { AnswerTimeout } from '../../shared/relay/answer-timeout.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { maxCallMs } from '../../shared/relay/pass-deadlines.ts';
import { useHarness } from '../support/harness.ts';
import { testClient, testSettings } from '../support/relay.ts';

const h = useHarness({ max: 6 });

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
});
