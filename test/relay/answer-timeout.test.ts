/**
 * The PutEvents answer timeout (issue 19): learned from the bus's answers, applied per call, and a
 * timed-out attempt is never sent again inside the same call.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { AnswerTimeout } from '../../shared/relay/answer-timeout.ts';
import { isNoAnswer, putEntries } from '../../shared/relay/buses/index.ts';
import { testClient } from '../support/relay.ts';

describe('AnswerTimeout', () => {
  it('goes to its ceiling after a timeout (issue 31: doubling took three tries for a 9 s bus)', () => {
    const t = new AnswerTimeout();
    expect(t.ms).toBe(3_000);
    t.timedOut();
    expect(t.ms).toBe(10_000);
    expect(new AnswerTimeout({ ceilingMs: 20_000 }).ms).toBe(3_000);
    const high = new AnswerTimeout({ ceilingMs: 20_000 });
    high.timedOut();
    expect(high.ms).toBe(20_000);
  });

  it('rises at once to four times a slow answer, and comes back down slowly once answers are fast', () => {
    const t = new AnswerTimeout({ ceilingMs: 60_000 });
    t.answered(4_000);
    expect(t.ms).toBe(16_000);
    // The slow answer is remembered for the next 31 answers.
    for (let i = 0; i < 31; i++) t.answered(20);
    expect(t.ms).toBe(16_000);
    t.answered(20);
    expect(t.ms).toBeCloseTo(16_000 - 15_000 * 0.1, 0);
    for (let i = 0; i < 47; i++) t.answered(20);
    expect(t.ms).toBeGreaterThanOrEqual(1_000);
    expect(t.ms).toBeLessThan(1_100);
  });

  it('never gives a call more than its budget', () => {
    const t = new AnswerTimeout();
    t.timedOut();
    expect(t.forCall(4_200.7)).toBe(4_200);
    expect(t.forCall(-5)).toBe(0);
  });
});

describe('AnswerTimeout.longestWait', () => {
  it('counts the ceiling, or all of a budget the invocation capped below it when at least 10 s', () => {
    const t = new AnswerTimeout({ ceilingMs: 27_000 });
    expect(t.longestWait(27_000, 27_000)).toBe('ceiling');
    expect(t.longestWait(16_000, 16_000)).toBe('capped');
    expect(t.longestWait(10_000, 10_000.7)).toBe('capped');
    // A learned timeout shorter than the budget: the next call waits longer.
    expect(t.longestWait(12_000, 16_000)).toBe(false);
    // Under 10 s of an invocation: given back, a later call gets more.
    expect(t.longestWait(9_000, 9_000)).toBe(false);
    expect(t.longestWait(3_000, 27_000)).toBe(false);
    // A ceiling under 10 s (a test's): the ceiling is the bound either way.
    expect(new AnswerTimeout({ ceilingMs: 1_000 }).longestWait(1_000, 5_000)).toBe('ceiling');
  });
});

describe('a PutEvents call with an answer timeout', () => {
  let bus: LocalBus;
  beforeAll(async () => {
    bus = await startLocalBus();
  });
  afterAll(() => bus.close());
  beforeEach(() => bus.reset());

  const entry = { EventBusName: 'bus', Source: 'orders', DetailType: 'OrderPlaced', Detail: '{"a":1}' };

  it('sends a timed-out attempt once (no SDK retry delivers it again), and succeeds with a longer timeout', async () => {
    bus.setFaults({ latencyMs: 1_000 });
    const client = testClient(bus.url, { maxAttempts: 3 });
    const [timedOut] = await putEntries(client, [entry], undefined, 300);
    expect(timedOut && isNoAnswer(timedOut)).toBe(true);
    expect(timedOut).toMatchObject({ ok: false, code: 'PutEventsTimeoutError', backPressure: true });
    // The bus still accepts what it was sent, late: one delivery, not three.
    await sleep(1_200);
    expect(bus.stats.requests).toBe(1);
    expect(bus.events).toHaveLength(1);

    const [answered] = await putEntries(client, [entry], undefined, 2_500);
    expect(answered).toEqual({ ok: true });
    expect(bus.stats.requests).toBe(2);
    client.destroy();
  });

  it('still retries an attempt that got an answer (HTTP 500) inside the call', async () => {
    bus.setFaults({ serverErrorRate: 1 });
    const client = testClient(bus.url, { maxAttempts: 3 });
    const [outcome] = await putEntries(client, [entry], undefined, 2_000);
    expect(outcome).toMatchObject({ ok: false, backPressure: true });
    expect(outcome && isNoAnswer(outcome)).toBe(false);
    expect(bus.stats.requests).toBe(3);
    client.destroy();
  });
});
