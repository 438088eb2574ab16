/**
 * A pass's deadlines (see pass.ts): the watchdog that aborts a pass a little before the lease it
 * last secured runs out (or the caller's `endBy`), bounds its statements by
 * {@link STATEMENT_DEADLINE_MS} and the time left, and gives each PutEvents call an abort signal of
 * its own; and the margins a pass keeps for marking, renewing and the watchdog's own lateness.
 */
import { OutboxDeadlineError, withDeadline } from '../platform/index.ts';
import type { Lease } from './lease.ts';

/** The longest any relay statement may take, ms; within a pass, the watchdog's time left bounds it sooner. */
export const STATEMENT_DEADLINE_MS = 10_000;
/**
 * The watchdog fires this long before the lease's end: clock rates differ, the last write is in
 * flight, and a CPU-starved process notices its timers late (the slowness test saw a pass return
 * 1.0 s after its lease with a 0.5 s margin, on a 2-core machine running four other test suites).
 */
export const LEASE_SAFETY_MS = 1_500;
/** Time kept after a PutEvents call, for marking its outcome, ms. */
export const MARK_RESERVE_MS = 1_500;
/** No round starts with a PutEvents budget shorter than this, ms. */
export const MIN_CALL_MS = 1_000;
/**
 * Longest PutEvents call at a lease of 13 s or less, SDK retries and their backoff included, ms;
 * a longer lease raises it (see {@link maxCallMs}).
 */
export const MAX_CALL_MS = 10_000;

/**
 * The longest a PutEvents call (and so one attempt's wait for the answer) may take under a lease
 * of `leaseSeconds`, ms: what a freshly renewed lease leaves after the watchdog's margin and the
 * time kept for marking, and never less than {@link MAX_CALL_MS}. The lease is renewed while the
 * call is out, so a call may outlast one lease; the lease is the operator's word on how long the
 * relay may wait, and a bus slower than 10 s is given time by a longer `OUTBOX_LEASE_SECONDS`
 * (30 s → 27 s). An invocation's remaining time caps each call lower.
 * @param leaseSeconds the configured lease (`OUTBOX_LEASE_SECONDS`), seconds
 */
export function maxCallMs(leaseSeconds: number): number {
  return Math.max(MAX_CALL_MS, leaseSeconds * 1000 - LEASE_SAFETY_MS - MARK_RESERVE_MS);
}
/** A pass renews its lease before a round once this share of the lease has gone by. */
export const RENEW_AFTER_SHARE = 0.25;

/** An abort signal for one call, and the function that disposes of it once the call is over. */
export interface CallSignal {
  signal: AbortSignal;
  /** Clears the timer and the listener on the parent; call it when the call has ended. */
  release: () => void;
}

/**
 * A signal aborted when `parent` aborts (with its reason) or after `ms` (with a `TimeoutError`
 * `DOMException`, as `AbortSignal.timeout` gives), for one PutEvents call.
 *
 * Not `AbortSignal.any([parent, AbortSignal.timeout(ms)])`: composite signals cost the relay
 * measurable CPU per event (docs/investigations/relay-cpu.md#one-controller-per-putevents-call).
 */
export function callSignal(parent: AbortSignal, ms: number): CallSignal {
  const controller = new AbortController();
  const onParent = () => controller.abort(parent.reason);
  const timer = setTimeout(
    () => controller.abort(new DOMException('The operation was aborted due to timeout', 'TimeoutError')),
    ms,
  );
  // Like AbortSignal.timeout's timer, it does not keep the process alive on its own.
  timer.unref();
  if (parent.aborted) onParent();
  else parent.addEventListener('abort', onParent, { once: true });
  return {
    signal: controller.signal,
    release: () => {
      clearTimeout(timer);
      parent.removeEventListener('abort', onParent);
    },
  };
}

/**
 * Aborts a pass before its lease (or the caller's deadline) runs out, and bounds its statements.
 * Re-armed after each renewal, since a renewal moves the lease's end.
 */
export class Watchdog {
  readonly #controller = new AbortController();
  readonly #lease: Lease;
  readonly #endBy: number;
  #timer: NodeJS.Timeout | undefined;

  constructor(lease: Lease, endBy: number) {
    this.#lease = lease;
    this.#endBy = endBy;
  }

  get signal(): AbortSignal {
    return this.#controller.signal;
  }

  /** ms before the pass must have returned. */
  leftMs(now = performance.now()): number {
    return Math.min(this.#lease.heldUntil - LEASE_SAFETY_MS, this.#endBy) - now;
  }

  arm(): void {
    clearTimeout(this.#timer);
    const ms = this.leftMs();
    const fire = () =>
      this.#controller.abort(
        new OutboxDeadlineError('relay pass', this.#lease.ms, 'its lease or the invocation ran out'),
      );
    if (ms <= 0) fire();
    else this.#timer = setTimeout(fire, ms);
  }

  /** Runs a statement bounded by {@link STATEMENT_DEADLINE_MS} and the time the pass has left. */
  statement<T>(operation: string, work: PromiseLike<T>): Promise<T> {
    return withDeadline(
      work,
      operation,
      Math.min(STATEMENT_DEADLINE_MS, this.leftMs()),
      this.#controller.signal,
    );
  }

  /** A signal for one PutEvents call: aborted when the watchdog fires or after `ms` (see {@link callSignal}). */
  callSignal(ms: number): CallSignal {
    return callSignal(this.#controller.signal, ms);
  }

  dispose(): void {
    clearTimeout(this.#timer);
  }
}
