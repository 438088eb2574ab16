import { setTimeout as sleep } from 'node:timers/promises';
import { describe, expect, it } from 'vitest';
import { callSignal } from '../../shared/relay/pass-deadlines.ts';

describe('the signal of one PutEvents call', () => {
  it('aborts with a TimeoutError once its budget is spent', async () => {
    const parent = new AbortController();
    const call = callSignal(parent.signal, 20);
    expect(call.signal.aborted).toBe(false);
    await sleep(60);
    expect(call.signal.aborted).toBe(true);
    expect((call.signal.reason as DOMException).name).toBe('TimeoutError');
    call.release();
  });

  it("aborts with the pass's reason when the pass's watchdog fires first", () => {
    const parent = new AbortController();
    const call = callSignal(parent.signal, 10_000);
    const reason = new Error('lease ran out');
    parent.abort(reason);
    expect(call.signal.aborted).toBe(true);
    expect(call.signal.reason).toBe(reason);
    call.release();
  });

  it('starts aborted under a watchdog that already fired', () => {
    const parent = new AbortController();
    parent.abort(new Error('late'));
    const call = callSignal(parent.signal, 10_000);
    expect(call.signal.aborted).toBe(true);
    call.release();
  });

  it('once released, is left alone by its timer and by the watchdog', async () => {
    const parent = new AbortController();
    const call = callSignal(parent.signal, 20);
    call.release();
    parent.abort(new Error('after the call'));
    await sleep(60);
    expect(call.signal.aborted).toBe(false);
  });
});
