/**
 * Idle-poll backoff (issue 48): after an empty claim the loop waits 10 ms, then 20, 40 … up to
 * `pollIntervalMs`, and starts from 10 ms again after a claim that found rows. Real Postgres and
 * the local bus; the passes are counted through `onPassEnd`, which sees empty claims too.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { enqueueMany } from '../../shared/producer/index.ts';
import { idlePollMs, type PassReport, runRelay } from '../../shared/relay/index.ts';
import { useHarness } from '../support/harness.ts';
import { testClient, testSettings } from '../support/relay.ts';

const h = useHarness();

const enqueue = (id: string) =>
  h.db.sql.begin((tx) =>
    enqueueMany(tx, [{ type: 'T', source: 'test.idle', aggregateType: 'a', aggregateId: id, payload: {} }]),
  );

/** Runs one lane for `ms`, recording every pass; `during` runs alongside. */
async function runFor(ms: number, pollIntervalMs: number, during?: () => Promise<void>) {
  const passes: PassReport[] = [];
  const abort = new AbortController();
  const client = testClient(h.bus.url);
  const run = runRelay({
    sql: h.db.sql,
    client,
    settings: testSettings({ pipelineDepth: 1, pollIntervalMs }),
    signal: abort.signal,
    onPassEnd: (pass) => passes.push(pass),
  });
  await Promise.all([sleep(ms), during?.()]);
  abort.abort();
  await run;
  client.destroy();
  return passes;
}

describe('idle-poll backoff', () => {
  it('waits 10, 20, 40 … ms after empty claims, capped at the poll interval', () => {
    expect([1, 2, 3, 4, 5, 6, 7, 50].map((n) => idlePollMs(n, 200))).toEqual([
      10, 20, 40, 80, 160, 200, 200, 200,
    ]);
    expect([1, 2, 3, 4].map((n) => idlePollMs(n, 40))).toEqual([10, 20, 40, 40]);
    expect(idlePollMs(1, 10)).toBe(10);
  });

  it('claims far less often in an idle second than a fixed poll at the first wait (10 ms)', async () => {
    const backoff = await runFor(1_000, 200);
    const fixed = await runFor(1_000, 10);
    // Backoff: passes at ~0, 10, 30, 70, 150, 310, 510, 710, 910 ms: 9; a fixed 10 ms poll: ~100
    // (fewer on a loaded machine, but always several times more).
    expect(backoff.length).toBeGreaterThanOrEqual(5);
    expect(backoff.length).toBeLessThanOrEqual(10);
    expect(fixed.length).toBeGreaterThan(backoff.length * 2);
    // The waits between empty passes double: each at least the backoff's value (timers never
    // fire much early), so the loop is not polling faster than it says.
    const gaps = backoff.slice(1).map((pass, i) => pass.startedAt - (backoff[i] as PassReport).endedAt);
    gaps.slice(0, 5).forEach((gap, i) => {
      expect(gap).toBeGreaterThanOrEqual(idlePollMs(i + 1, 200) - 2);
    });
  }, 20_000);

  it('an event committed while idle is published within the cap; a claim with rows resets the wait', async () => {
    let committedAt = 0;
    const passes = await runFor(1_500, 200, async () => {
      // Idle for 1 s: the lane waits the full 200 ms between claims by now.
      await sleep(1_000);
      committedAt = Date.now();
      await enqueue('late');
    });
    expect(h.bus.events).toHaveLength(1);
    const lag = (h.bus.events[0]?.receivedAt ?? 0) - committedAt;
    // At most one capped wait (200 ms) plus a claim and a PutEvents on a loaded machine.
    expect(lag).toBeLessThan(200 + 300);
    // After the pass that claimed it, the next empty claim waits 10 ms again, then 20.
    const claimed = passes.findIndex((p) => (p.counts?.claimed ?? 0) > 0);
    expect(claimed).toBeGreaterThan(0);
    const after = passes.slice(claimed, claimed + 4);
    expect(after.length).toBe(4);
    const gap = (i: number) => (after[i + 1] as PassReport).startedAt - (after[i] as PassReport).endedAt;
    // No wait after the claim with rows (it claims again at once), then 10 ms, then 20 ms.
    expect(gap(0)).toBeLessThan(10);
    expect(gap(1)).toBeGreaterThanOrEqual(8);
    expect(gap(1)).toBeLessThan(200);
    expect(gap(2)).toBeGreaterThanOrEqual(18);
  }, 20_000);
});
