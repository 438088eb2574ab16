/**
 * One pass: claim → publish → mark, inside its lease.
 *
 * A pass claims a leased batch, then publishes it in rounds: round r holds the r-th claimed event
 * of every aggregate, so an aggregate's event N+1 is sent only after event N was accepted and
 * marked. An aggregate whose event failed sends nothing more in this pass; its remaining events are
 * released (attempt returned) to wait behind the failed one's backoff. Other aggregates go on.
 *
 * Deadlines. Nothing in a pass outlives its lease. A watchdog aborts the pass a little before the
 * lease it last secured runs out (or the caller's `endBy`, a Lambda's deadline, arrives); every
 * statement is bounded by the watchdog and by {@link STATEMENT_DEADLINE_MS}; every PutEvents call,
 * SDK retries included, is aborted at a budget that leaves time to mark its outcome. A pass slower
 * than a quarter of its lease renews it before its next round, so a live pass keeps its rows
 * however slow the bus, while a dead relay's rows come back one short lease after it died.
 */
import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import {
  type ConnectionPool,
  compareInt8,
  currentSql,
  OutboxDeadlineError,
  type RelaySettings,
  type Sql,
  withDeadline,
} from '../platform/index.ts';
import { AnswerTimeout } from './answer-timeout.ts';
import { backoffDelayMs } from './backoff.ts';
import { emptyCounts, type RelayCounts } from './counts.ts';
import type { Lease } from './lease.ts';
import {
  type EntryOutcome,
  isNoAnswer,
  mapWithConcurrency,
  packRequests,
  putEntries,
  toEntry,
} from './publish.ts';
import type { Semaphore } from './semaphore.ts';
import {
  type ClaimOptions,
  claimBatch,
  type Failure,
  markPublished,
  recordFailures,
  releaseUnsent,
  renewLease,
  startRound,
  type UnsentRow,
  unparkNextEvents,
} from './sql/index.ts';
import type { ClaimedEvent } from './types.ts';

/** What a pass needs. */
export interface RelayDeps {
  /**
   * The database. Give a {@link ConnectionPool} (see `openPool`) so the loop can replace the
   * connections after one broke or stopped answering; a plain pool works but is never replaced.
   */
  sql: Sql | ConnectionPool;
  client: EventBridgeClient;
  settings: RelaySettings;
  /** Source of randomness for backoff jitter; tests may fix it. */
  random?: () => number;
  /** Caps PutEvents calls in flight across concurrent passes; default: `publishConcurrency` per pass. */
  publishSlots?: Semaphore;
  /**
   * How long a PutEvents attempt waits for the answer, learned from the bus; share one across the
   * passes of a relay (the loop does). Default: a new one per pass (3 s until it learns).
   */
  answerTimeout?: AnswerTimeout;
  /** Called for every event that failed in a pass, with the reason recorded in its `last_error`. */
  onFailure?: (failure: RelayFailure) => void;
}

/** An event that failed in a pass: retried later, or dead-lettered. */
export interface RelayFailure {
  eventId: string;
  /** `ErrorCode: message`, as recorded in `last_error`. */
  reason: string;
  deadLettered: boolean;
}

/** Options of one pass. */
export interface PassOptions {
  /** `performance.now()` by which the pass must have returned (a Lambda's deadline less a margin). */
  endBy?: number;
  /**
   * Passes in a row that met back-pressure before this one: back-pressured rows back off as if
   * this were their attempt `streak + 1` (their own attempt count does not grow).
   */
  backPressureStreak?: number;
  /**
   * Runs the claim statement instead of the pass (default: `claimBatch` on `deps.sql`). The
   * model-based test runs it inside a transaction it commits later, so that other claims overlap
   * an uncommitted one in Postgres.
   */
  claim?: (options: ClaimOptions) => Promise<ClaimedEvent[]>;
  /**
   * Awaited at each step of the pass (see {@link PassCheckpoint}), with no statement or call in
   * flight; a rejection ends the pass there, leaving its rows leased as a crash would. For the
   * model-based test, which interleaves passes step by step; not bounded by the pass's deadlines.
   */
  checkpoint?: (at: PassCheckpoint) => Promise<void>;
}

/**
 * The steps at which a pass awaits {@link PassOptions.checkpoint}: the claim answered; a round is
 * about to start (its successors' attempts not spent yet, nothing sent); a round's PutEvents calls
 * answered (nothing marked yet); the pass is about to hand back what is left and unpark.
 */
export type PassCheckpoint = 'claimed' | 'round' | 'sent' | 'finishing';

/** The longest any relay statement may take, ms; within a pass, the watchdog's time left bounds it sooner. */
export const STATEMENT_DEADLINE_MS = 10_000;
/**
 * The watchdog fires this long before the lease's end: clock rates differ, the last write is in
 * flight, and a CPU-starved process notices its timers late (the slowness test saw a pass return
 * 1.0 s after its lease with a 0.5 s margin, on a 2-core machine running four other test suites).
 */
const LEASE_SAFETY_MS = 1_500;
/** Time kept after a PutEvents call, for marking its outcome, ms. */
const MARK_RESERVE_MS = 1_500;
/** No round starts with a PutEvents budget shorter than this, ms. */
const MIN_CALL_MS = 1_000;
/** Longest PutEvents call, SDK retries and their backoff included, ms. */
const MAX_CALL_MS = 10_000;
/** A pass renews its lease before a round once this share of the lease has gone by. */
const RENEW_AFTER_SHARE = 0.25;
/** A renewal for the sake of a slow call is made only if it extends the lease by at least this, ms. */
const MIN_RENEWAL_GAIN_MS = 500;

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
 * Not `AbortSignal.any([parent, AbortSignal.timeout(ms)])`: the SDK adds several abort listeners
 * per call, and each listener added to a composite signal makes Node track the composite against
 * its sources. In a CPU profile of the relay the composite signals cost about 3 µs per event (30 µs
 * per 10-entry call); with one controller, one timer and one listener the relay spent 2 µs less
 * CPU per event at 0 ms bus latency and 9 µs less at 20 ms (in-process, 20,000 events, medians of
 * alternating runs).
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
class Watchdog {
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

/**
 * One claim-publish-mark pass under `lease` (created by the caller, which hands the lease's rows
 * back if the pass fails: see {@link Lease.leftover}).
 * @throws transient database errors ({@link OutboxDeadlineError} when a statement or the pass ran
 *   out of time); the rows the lease still holds are then the caller's to hand back
 */
export async function relayPass(
  deps: RelayDeps,
  lease: Lease,
  options: PassOptions = {},
): Promise<RelayCounts> {
  const { client, settings } = deps;
  const sql = () => currentSql(deps.sql);
  const random = deps.random ?? Math.random;
  const answerTimeout = deps.answerTimeout ?? new AnswerTimeout();
  const counts = emptyCounts();
  const token = lease.token;
  const endBy = options.endBy ?? Number.POSITIVE_INFINITY;
  const watchdog = new Watchdog(lease, endBy);
  try {
    lease.claimSending(settings.ordering);
    watchdog.arm();
    const claimOptions: ClaimOptions = {
      leaseToken: token,
      leaseSeconds: lease.seconds,
      batchSize: settings.batchSize,
      perAggregateLimit: settings.perAggregateLimit,
      ordering: settings.ordering,
      deadLetterPolicy: settings.deadLetterPolicy,
    };
    const events = await watchdog.statement(
      'claim',
      options.claim ? options.claim(claimOptions) : claimBatch(sql(), claimOptions),
    );
    lease.claimed(
      events.map((e) => e.id),
      events.filter((e) => e.isHead).map((e) => e.id),
    );
    counts.claimed = events.length;
    if (events.length === 0) return counts;
    const checkpoint = options.checkpoint ?? (async () => {});
    await checkpoint('claimed');

    /** Aggregates that must send nothing more this pass → ms before their next event may go. */
    const stopped = new Map<string, number>();
    // Per aggregate, the claimed events not yet sent, in sequence order. With ordering `none` every
    // event is a queue of its own, so everything goes in the first round.
    const queues = new Map<string, ClaimedEvent[]>();
    const keyOf = (event: ClaimedEvent) => (settings.ordering === 'none' ? event.id : aggregateKey(event));
    for (const event of [...events].sort((a, b) => compareInt8(a.sequence, b.sequence))) {
      const queue = queues.get(keyOf(event));
      if (queue) queue.push(event);
      else queues.set(keyOf(event), [event]);
    }
    const toRelease: UnsentRow[] = [];
    /**
     * Stops an aggregate: its unsent events are handed back, to go no earlier than `notBeforeMs`,
     * with the attempt returned where one was spent (a head; a successor spent none).
     */
    const stop = (key: string, notBeforeMs: number) => {
      stopped.set(key, notBeforeMs);
      for (const e of queues.get(key) ?? [])
        if (lease.held.has(e.id))
          toRelease.push({ id: e.id, notBeforeMs, giveBackAttempt: lease.spent.has(e.id) });
      queues.delete(key);
    };
    const release = async () => {
      const releasing = toRelease.splice(0);
      if (releasing.length === 0) return;
      const released = await watchdog.statement('release unsent', releaseUnsent(sql(), token, releasing));
      lease.settled(releasing.map((r) => r.id));
      counts.released += released;
      counts.leaseLost += releasing.length - released;
    };

    // Successors without their head: the head changed under the claim's lock (another writer
    // touched it in that instant) and was not leased. Sending the successors would overtake it, so
    // they are handed straight back.
    for (const [key, queue] of queues) {
      if (queue[0] && !queue[0].isHead) stop(key, 0);
    }

    // A row claimed more often than allowed never got an outcome recorded: it crashed the relay or
    // outlived its lease each time. Dead-letter it instead of trying again (attempts are counted at
    // claim precisely so that such a row cannot loop forever).
    const exhausted: Failure[] = [];
    for (const [key, queue] of queues) {
      const head = queue[0];
      if (head && head.attempts > settings.maxAttempts) {
        exhausted.push(exhaustedFailure(head, settings.maxAttempts));
        queue.shift();
        stop(key, 0);
        deps.onFailure?.({
          eventId: head.eventId,
          reason: exhausted.at(-1)?.error ?? '',
          deadLettered: true,
        });
      }
    }
    if (exhausted.length > 0) {
      const recorded = await watchdog.statement(
        'dead-letter exhausted',
        recordFailures(sql(), token, exhausted),
      );
      lease.settled(exhausted.map((f) => f.id));
      counts.deadLettered += recorded;
      counts.leaseLost += exhausted.length - recorded;
    }

    /**
     * Renews the lease when a quarter of it has gone by (or sooner for a slow bus, below), then
     * says whether a round still fits before the watchdog fires. Rows the renewal found taken (the
     * lease had run out, which the watchdog should have prevented) stop their aggregates.
     */
    const roundFits = async (): Promise<boolean> => {
      // Renewed when a quarter of the lease has gone by, or sooner when what it leaves cannot hold
      // the call the bus's recent answers ask for (and a renewal would give it more).
      const callWants = answerTimeout.ms + MARK_RESERVE_MS + LEASE_SAFETY_MS;
      const due =
        lease.leftMs() < lease.ms * (1 - RENEW_AFTER_SHARE) ||
        (lease.leftMs() < callWants && lease.leftMs() < lease.ms - MIN_RENEWAL_GAIN_MS);
      const worthIt = endBy - performance.now() > MARK_RESERVE_MS + MIN_CALL_MS;
      if (due && worthIt && lease.held.size > 0) {
        const secured = lease.renewalSending();
        const held = [...lease.held];
        const kept = await watchdog.statement('renew lease', renewLease(sql(), token, held, lease.seconds));
        secured();
        watchdog.arm();
        counts.leaseRenewals++;
        const lost = held.filter((id) => !kept.has(id));
        if (lost.length > 0) {
          lease.settled(lost);
          counts.leaseLost += lost.length;
          for (const [key, queue] of [...queues]) if (queue.some((e) => !kept.has(e.id))) stop(key, 0);
        }
      }
      return watchdog.leftMs() >= MARK_RESERVE_MS + MIN_CALL_MS;
    };

    while (queues.size > 0) {
      if (!(await roundFits())) {
        // Too little time left to send and mark safely: hand the rest back untouched.
        for (const key of [...queues.keys()]) stop(key, 0);
        break;
      }
      await checkpoint('round');
      let round: ClaimedEvent[] = [];
      for (const queue of queues.values()) round.push(queue.shift() as ClaimedEvent);
      for (const [key, queue] of queues) if (queue.length === 0) queues.delete(key);

      // Successors start their publication now, and spend their attempt now: not at claim, where a
      // relay that died while sending the head would have charged them for it. A successor this
      // lease no longer owns is not sent; one over its attempts (started that often, each ending
      // without an outcome) is dead-lettered instead of sent, as an exhausted head is.
      const successors = round.filter((e) => !e.isHead);
      const roundFailures: Failure[] = [];
      if (successors.length > 0) {
        const started = await watchdog.statement(
          'start round',
          startRound(
            sql(),
            token,
            successors.map((e) => e.id),
          ),
        );
        lease.started(started.keys());
        const skip = new Set<string>();
        for (const event of successors) {
          const attempts = started.get(event.id);
          if (attempts === undefined) {
            lease.settled([event.id]);
            counts.leaseLost++;
            skip.add(event.id);
            stop(keyOf(event), 0);
            continue;
          }
          event.attempts = attempts;
          if (attempts > settings.maxAttempts) {
            const failure = exhaustedFailure(event, settings.maxAttempts);
            roundFailures.push(failure);
            counts.deadLettered++;
            deps.onFailure?.({ eventId: event.eventId, reason: failure.error, deadLettered: true });
            skip.add(event.id);
            stop(keyOf(event), 0);
          }
        }
        if (skip.size > 0) round = round.filter((e) => !skip.has(e.id));
      }

      const items = round.map((event) => ({ event, entry: toEntry(event, settings.eventBusName) }));
      const requests = packRequests(items, settings.maxRequestBytes);
      counts.putEventsCalls += requests.length;
      const outcomes = await mapWithConcurrency(requests, settings.publishConcurrency, async (request) => {
        const send = async () => {
          // Measured when the call starts (after waiting for a slot), so that the call, SDK
          // retries included, ends while there is still time to mark its outcome.
          const budget = Math.min(MAX_CALL_MS, watchdog.leftMs() - MARK_RESERVE_MS);
          const call = watchdog.callSignal(Math.max(0, Math.floor(budget)));
          // Each attempt waits what the bus's recent answers ask for, within the call's budget.
          const attemptMs = answerTimeout.forCall(budget);
          const callStarted = performance.now();
          let results: EntryOutcome[] | undefined;
          try {
            results = await putEntries(
              client,
              request.map((i) => i.entry),
              call.signal,
              attemptMs,
            );
            return results;
          } finally {
            call.release();
            const took = performance.now() - callStarted;
            counts.putEventsMs += took;
            const first = results?.[0];
            if (first && isNoAnswer(first)) {
              // Aborted by the watchdog, the pass is over; otherwise the attempt (or the call's
              // budget) ran out before the bus answered: the next call may wait longer.
              if (!watchdog.signal.aborted) answerTimeout.timedOut(took);
            } else if (first) answerTimeout.answered(took);
          }
        };
        const results = deps.publishSlots ? await deps.publishSlots.run(send) : await send();
        return request.map((item, i) => ({ event: item.event, outcome: results[i] as EntryOutcome }));
      });
      // The lease is about to run out (a statement or the bus held the pass up): whatever this
      // round sent is unknown, so the pass fails and the caller hands its rows back.
      if (watchdog.signal.aborted) throw watchdog.signal.reason;
      await checkpoint('sent');

      const publishedIds: string[] = [];
      const failures: Failure[] = roundFailures;
      for (const { event, outcome } of outcomes.flat()) {
        if (outcome.ok) {
          publishedIds.push(event.id);
          continue;
        }
        if (outcome.throttled) counts.throttled++;
        let failure: Failure;
        if (outcome.backPressure) {
          // Not the entry's fault: its attempt is given back, and it waits out a backoff that
          // grows with how long the pressure has lasted rather than with its own attempts.
          counts.backPressure++;
          const streak = Math.max(event.attempts, (options.backPressureStreak ?? 0) + 1);
          failure = {
            id: event.id,
            error: `${outcome.code}: ${outcome.message}`,
            deadLetter: false,
            retryInMs: backoffDelayMs(streak, settings.backoffBaseMs, settings.backoffMaxMs, random),
            giveBackAttempt: true,
          };
        } else {
          const deadLetter = outcome.permanent || event.attempts >= settings.maxAttempts;
          failure = {
            id: event.id,
            error: `${outcome.code}: ${outcome.message}`,
            deadLetter,
            retryInMs: deadLetter
              ? 0
              : backoffDelayMs(event.attempts, settings.backoffBaseMs, settings.backoffMaxMs, random),
          };
        }
        failures.push(failure);
        deps.onFailure?.({ eventId: event.eventId, reason: failure.error, deadLettered: failure.deadLetter });
        if (failure.deadLetter) counts.deadLettered++;
        else counts.retried++;
        // The rest of this aggregate's claim is handed back now (not at the end of the pass, when the
        // backoff may already have run out and another relay claimed the aggregate): behind a retry
        // it waits for the backoff; behind a dead letter (`continue`) it may go at once.
        stop(keyOf(event), failure.deadLetter ? 0 : failure.retryInMs);
      }
      // Mark before the next round is sent: an event is recorded as published before its
      // successor leaves, which keeps re-publication after a crash to the events that need it.
      const releasing = toRelease.splice(0);
      const [marked, failed, released] = await Promise.all([
        watchdog.statement('mark published', markPublished(sql(), token, publishedIds)),
        watchdog.statement('record failures', recordFailures(sql(), token, failures)),
        watchdog.statement('release unsent', releaseUnsent(sql(), token, releasing)),
      ]);
      lease.settled([...publishedIds, ...failures.map((f) => f.id), ...releasing.map((r) => r.id)]);
      counts.published += marked;
      counts.released += released;
      counts.leaseLost +=
        publishedIds.length - marked + (failures.length - failed) + (releasing.length - released);
      if (failed < failures.length) {
        // Outcomes of rows we no longer own were not recorded; do not report them as ours.
        counts.retried = Math.max(0, counts.retried - (failures.length - failed));
      }
    }
    await checkpoint('finishing');
    await release();
    if (settings.ordering === 'aggregate') {
      // Aggregates whose claimed events are all settled (published, or dead-lettered and so out of
      // the way): their next event may go now. Aggregates in backoff stay parked behind it.
      const settled = new Map<string, { aggregateType: string; aggregateId: string }>();
      for (const e of events) {
        const key = aggregateKey(e);
        if ((stopped.get(key) ?? 0) === 0 && !settled.has(key)) {
          settled.set(key, { aggregateType: e.aggregateType, aggregateId: e.aggregateId });
        }
      }
      await watchdog.statement('unpark next events', unparkNextEvents(sql(), [...settled.values()]));
    }
    return counts;
  } finally {
    watchdog.dispose();
  }
}

/** The dead-lettering of an event started more often than allowed, none of them with an outcome. */
function exhaustedFailure(event: ClaimedEvent, maxAttempts: number): Failure {
  return {
    id: event.id,
    error: `AttemptsExhausted: claimed ${event.attempts} times (max ${maxAttempts}) without a recorded outcome; the relay crashed or lost its lease on each attempt`,
    deadLetter: true,
    retryInMs: 0,
  };
}

function aggregateKey(event: ClaimedEvent): string {
  return `${event.aggregateType}\u0000${event.aggregateId}`;
}
