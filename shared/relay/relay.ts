/**
 * The relay: claim → publish → mark, and the loop that repeats it.
 *
 * One pass claims a leased batch, then publishes it in rounds: round r holds the r-th claimed event
 * of every aggregate, so an aggregate's event N+1 is sent only after event N was accepted and
 * marked. An aggregate whose event failed sends nothing more in this pass; its remaining events are
 * released (attempt returned) to wait behind the failed one's backoff. Other aggregates go on.
 */
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import type { RelaySettings } from '../platform/index.ts';
import { isTransientDatabaseError, type Sql } from '../platform/index.ts';
import { backoffDelayMs } from './backoff.ts';
import { claimBatch } from './claim.ts';
import {
  abandonLease,
  type Failure,
  markPublished,
  recordFailures,
  releaseUnsent,
  unparkNextEvents,
} from './complete.ts';
import { type EntryOutcome, mapWithConcurrency, packRequests, putEntries, toEntry } from './publish.ts';
import type { ClaimedEvent } from './types.ts';

/** Counts of one pass, or of a whole run. */
export interface RelayCounts {
  /** Rows claimed (heads and their successors). */
  claimed: number;
  /** Rows accepted by the bus and marked published. */
  published: number;
  /** Rows that failed with a retryable error and were scheduled for a later attempt. */
  retried: number;
  /** Rows dead-lettered (permanent error, or attempts exhausted). */
  deadLettered: number;
  /** Rows claimed but not sent (an earlier event of their aggregate failed, or the lease ran short). */
  released: number;
  /** Rows whose lease had passed to another relay when this one tried to write their outcome. */
  leaseLost: number;
  /** Entries refused with ThrottlingException. */
  throttled: number;
  /** PutEvents requests sent. */
  putEventsCalls: number;
  /** Time spent in PutEvents calls (SDK retries included), summed over calls, ms. */
  putEventsMs: number;
}

/** A zeroed {@link RelayCounts}. */
export function emptyCounts(): RelayCounts {
  return {
    claimed: 0,
    published: 0,
    retried: 0,
    deadLettered: 0,
    released: 0,
    leaseLost: 0,
    throttled: 0,
    putEventsCalls: 0,
    putEventsMs: 0,
  };
}

function addCounts(into: RelayCounts, from: RelayCounts): void {
  for (const key of Object.keys(into) as (keyof RelayCounts)[]) into[key] += from[key];
}

/** What a pass needs. */
export interface RelayDeps {
  sql: Sql;
  client: EventBridgeClient;
  settings: RelaySettings;
  /** Source of randomness for backoff jitter; tests may fix it. */
  random?: () => number;
  /** Caps PutEvents calls in flight across concurrent passes; default: `publishConcurrency` per pass. */
  publishSlots?: Semaphore;
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

/** No round is started with less lease than this left: one PutEvents call with the SDK's retries fits in it. */
const MIN_LEASE_LEFT_TO_SEND_MS = 12_000;

/**
 * One claim-publish-mark pass.
 * @param leaseSeconds lease for this pass; defaults to `settings.leaseSeconds`
 * @throws database errors (rows then stay leased until the lease expires, and are claimed again)
 */
export async function relayOnce(
  deps: RelayDeps,
  leaseSeconds = deps.settings.leaseSeconds,
): Promise<RelayCounts> {
  const { sql, client, settings } = deps;
  const random = deps.random ?? Math.random;
  const counts = emptyCounts();
  const leaseToken = randomUUID();
  // Measured before the claim is sent, so the local deadline is never later than the database's.
  const claimedAt = performance.now();
  const events = await claimBatch(sql, {
    leaseToken,
    leaseSeconds,
    batchSize: settings.batchSize,
    perAggregateLimit: settings.perAggregateLimit,
    ordering: settings.ordering,
    deadLetterPolicy: settings.deadLetterPolicy,
  });
  counts.claimed = events.length;
  if (events.length === 0) return counts;
  try {
    const sendUntil =
      claimedAt + leaseSeconds * 1000 - Math.min(MIN_LEASE_LEFT_TO_SEND_MS, (leaseSeconds * 1000) / 2);

    /** Aggregates that must send nothing more this pass → ms before their next event may go. */
    const stopped = new Map<string, number>();
    // Per aggregate, the claimed events not yet sent, in sequence order. With ordering `none` every
    // event is a queue of its own, so everything goes in the first round.
    const queues = new Map<string, ClaimedEvent[]>();
    for (const event of [...events].sort((a, b) => a.sequence - b.sequence)) {
      const key = settings.ordering === 'none' ? event.id : aggregateKey(event);
      const queue = queues.get(key);
      if (queue) queue.push(event);
      else queues.set(key, [event]);
    }
    /** Stops an aggregate: its unsent events are handed back, to go no earlier than `notBeforeMs`. */
    const stop = (key: string, notBeforeMs: number, into: { id: string; notBeforeMs: number }[]) => {
      stopped.set(key, notBeforeMs);
      for (const e of queues.get(key) ?? []) into.push({ id: e.id, notBeforeMs });
      queues.delete(key);
    };

    // Successors without their head: the head changed under the claim's lock (another writer
    // touched it in that instant) and was not leased. Sending the successors would overtake it, so
    // they are handed straight back.
    const toRelease: { id: string; notBeforeMs: number }[] = [];
    for (const [key, queue] of queues) {
      if (queue[0] && !queue[0].isHead) stop(key, 0, toRelease);
    }

    // A row claimed more often than allowed never got an outcome recorded: it crashed the relay or
    // outlived its lease each time. Dead-letter it instead of trying again (attempts are counted at
    // claim precisely so that such a row cannot loop forever).
    const exhausted: Failure[] = [];
    for (const [key, queue] of queues) {
      const head = queue[0];
      if (head && head.attempts > settings.maxAttempts) {
        exhausted.push({
          id: head.id,
          error: `AttemptsExhausted: claimed ${head.attempts} times (max ${settings.maxAttempts}) without a recorded outcome; the relay crashed or lost its lease on each attempt`,
          deadLetter: true,
          retryInMs: 0,
        });
        queue.shift();
        stop(key, 0, toRelease);
        deps.onFailure?.({
          eventId: head.eventId,
          reason: exhausted.at(-1)?.error ?? '',
          deadLettered: true,
        });
      }
    }
    if (exhausted.length > 0) {
      const recorded = await recordFailures(sql, leaseToken, exhausted);
      counts.deadLettered += recorded;
      counts.leaseLost += exhausted.length - recorded;
    }

    while (queues.size > 0) {
      if (performance.now() > sendUntil) {
        // Too little lease left to send and mark safely: hand the rest back untouched.
        for (const key of [...queues.keys()]) stop(key, 0, toRelease);
        break;
      }
      const round: ClaimedEvent[] = [];
      for (const queue of queues.values()) round.push(queue.shift() as ClaimedEvent);
      for (const [key, queue] of queues) if (queue.length === 0) queues.delete(key);

      const items = round.map((event) => ({ event, entry: toEntry(event, settings.eventBusName) }));
      const requests = packRequests(items, settings.maxRequestBytes);
      counts.putEventsCalls += requests.length;
      const outcomes = await mapWithConcurrency(requests, settings.publishConcurrency, async (request) => {
        const send = async () => {
          const callStarted = performance.now();
          const sent = await putEntries(
            client,
            request.map((i) => i.entry),
          );
          counts.putEventsMs += performance.now() - callStarted;
          return sent;
        };
        const results = deps.publishSlots ? await deps.publishSlots.run(send) : await send();
        return request.map((item, i) => ({ event: item.event, outcome: results[i] as EntryOutcome }));
      });

      const publishedIds: string[] = [];
      const failures: Failure[] = [];
      for (const { event, outcome } of outcomes.flat()) {
        if (outcome.ok) {
          publishedIds.push(event.id);
          continue;
        }
        if (outcome.throttled) counts.throttled++;
        const deadLetter = outcome.permanent || event.attempts >= settings.maxAttempts;
        const retryInMs = deadLetter
          ? 0
          : backoffDelayMs(event.attempts, settings.backoffBaseMs, settings.backoffMaxMs, random);
        failures.push({ id: event.id, error: `${outcome.code}: ${outcome.message}`, deadLetter, retryInMs });
        deps.onFailure?.({
          eventId: event.eventId,
          reason: `${outcome.code}: ${outcome.message}`,
          deadLettered: deadLetter,
        });
        // The rest of this aggregate's claim is handed back now (not at the end of the pass, when the
        // backoff may already have run out and another relay claimed the aggregate): behind a retry
        // it waits for the backoff; behind a dead letter (`continue`) it may go at once.
        if (deadLetter) counts.deadLettered++;
        else counts.retried++;
        stop(
          settings.ordering === 'none' ? event.id : aggregateKey(event),
          deadLetter ? 0 : retryInMs,
          toRelease,
        );
      }
      // Mark before the next round is sent: an event is recorded as published before its
      // successor leaves, which keeps re-publication after a crash to the events that need it.
      const releasing = toRelease.splice(0);
      const [marked, failed, released] = await Promise.all([
        markPublished(sql, leaseToken, publishedIds),
        recordFailures(sql, leaseToken, failures),
        releaseUnsent(sql, leaseToken, releasing),
      ]);
      counts.published += marked;
      counts.released += released;
      counts.leaseLost +=
        publishedIds.length - marked + (failures.length - failed) + (releasing.length - released);
      if (failed < failures.length) {
        // Outcomes of rows we no longer own were not recorded; do not report them as ours.
        counts.retried = Math.max(0, counts.retried - (failures.length - failed));
      }
    }
    if (toRelease.length > 0) {
      const released = await releaseUnsent(sql, leaseToken, toRelease);
      counts.released += released;
      counts.leaseLost += toRelease.length - released;
    }
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
      await unparkNextEvents(sql, [...settled.values()]);
    }
  } catch (error) {
    // Tell the loop which lease the failed pass held, so it can hand the rows back once the
    // database answers again instead of leaving them (and their spent attempt) until expiry.
    if (error && typeof error === 'object') (error as { leaseToken?: string }).leaseToken = leaseToken;
    throw error;
  }
  return counts;
}

function aggregateKey(event: ClaimedEvent): string {
  return `${event.aggregateType}\u0000${event.aggregateId}`;
}

/** Options of {@link runRelay}. */
export interface RunRelayOptions extends RelayDeps {
  /** Stops the loop after the current pass. */
  signal?: AbortSignal;
  /** One pass, then return. */
  once?: boolean;
  /** Return once no unpublished, not-dead-lettered row is left. */
  untilEmpty?: boolean;
  /**
   * Milliseconds left before the caller must return (a Lambda's `getRemainingTimeInMillis`). Each
   * pass's lease is capped to fit in it, and the loop stops claiming when no useful lease fits.
   */
  remainingMs?: () => number;
  /** Called after every pass that claimed something. */
  onPass?: (counts: RelayCounts) => void;
  /** Give up (rethrow) after this many transient database errors in a row. Default: never. */
  maxConsecutiveErrors?: number;
  /** Called when a pass failed with a transient database error and will be retried. */
  onTransientError?: (error: unknown, consecutive: number) => void;
}

/** Why {@link runRelay} returned. */
export type StopReason = 'once' | 'empty' | 'deadline' | 'aborted';

/** Shortest lease worth claiming with, seconds. */
const MIN_LEASE_SECONDS = 5;
/** Time kept back at the end of an invocation for the final marks and the summary, ms. */
const DEADLINE_MARGIN_MS = 3_000;

/**
 * Relays until stopped: by `signal`, after one pass (`once`), when the outbox is drained
 * (`untilEmpty`), or when `remainingMs` can no longer cover a lease. Polls every
 * `settings.pollIntervalMs` while idle. On throttling the whole loop pauses (doubling up to 2 s)
 * rather than spending attempts of more rows.
 * @returns the totals and why it stopped
 */
export async function runRelay(
  options: RunRelayOptions,
): Promise<RelayCounts & { passes: number; stopReason: StopReason }> {
  // Pipelining: several passes run at once (lanes), so one lane's claim and marks overlap another
  // lane's PutEvents calls. Leases keep the lanes' rows apart exactly as they keep separate relays
  // apart, and one semaphore caps the PutEvents calls in flight across lanes.
  const lanes = options.once ? 1 : Math.max(1, options.settings.pipelineDepth);
  const publishSlots = options.publishSlots ?? new Semaphore(options.settings.publishConcurrency);
  const results = await Promise.all(
    Array.from({ length: lanes }, () => runLane({ ...options, publishSlots })),
  );
  const totals = emptyCounts();
  for (const r of results) addCounts(totals, r);
  const order: StopReason[] = ['aborted', 'deadline', 'once', 'empty'];
  const stopReason = order.find((reason) => results.some((r) => r.stopReason === reason)) ?? 'empty';
  return { ...totals, passes: results.reduce((n, r) => n + r.passes, 0), stopReason };
}

async function runLane(
  options: RunRelayOptions,
): Promise<RelayCounts & { passes: number; stopReason: StopReason }> {
  const { settings, signal } = options;
  const totals = emptyCounts();
  let passes = 0;
  let throttlePauseMs = 0;
  let consecutiveErrors = 0;
  /** Leases of passes that failed on the database, to hand back when it answers again. */
  const abandoned = new Set<string>();
  const stop = (stopReason: StopReason) => ({ ...totals, passes, stopReason });

  for (;;) {
    if (signal?.aborted) return stop('aborted');
    let leaseSeconds = settings.leaseSeconds;
    if (options.remainingMs) {
      const fits = Math.floor((options.remainingMs() - DEADLINE_MARGIN_MS) / 1000);
      leaseSeconds = Math.min(leaseSeconds, fits);
      if (leaseSeconds < MIN_LEASE_SECONDS) return stop('deadline');
    }
    let counts: RelayCounts;
    try {
      for (const token of abandoned) {
        await abandonLease(options.sql, token);
        abandoned.delete(token);
      }
      counts = await relayOnce(options, leaseSeconds);
      consecutiveErrors = 0;
    } catch (error) {
      // A connection that died (while a Lambda was frozen, or in a Postgres restart) is replaced
      // by the pool on the next query; rows of the failed pass stay leased until their lease
      // expires and are then claimed again, so nothing is lost by retrying here.
      if (!isTransientDatabaseError(error)) throw error;
      consecutiveErrors++;
      const failedLease = (error as { leaseToken?: string }).leaseToken;
      if (failedLease) abandoned.add(failedLease);
      if (options.maxConsecutiveErrors !== undefined && consecutiveErrors >= options.maxConsecutiveErrors)
        throw error;
      options.onTransientError?.(error, consecutiveErrors);
      await pause(Math.min(5_000, 50 * 2 ** Math.min(consecutiveErrors, 10)), options);
      continue;
    }
    passes++;
    addCounts(totals, counts);
    if (counts.claimed > 0) options.onPass?.(counts);
    if (options.once) return stop('once');

    // Throttling means the account's PutEvents rate is exhausted: slow the whole loop down
    // (doubling from 50 ms up to 2 s) instead of spending more rows' attempts, and speed back up
    // by halving the pause after every pass without throttling.
    if (counts.throttled > 0) {
      throttlePauseMs = Math.min(2_000, Math.max(50, throttlePauseMs * 2));
      await pause(throttlePauseMs, options);
      continue;
    }
    throttlePauseMs = Math.floor(throttlePauseMs / 2);
    if (counts.claimed > 0) continue;
    if (options.untilEmpty) {
      const pending = await hasPending(options.sql).catch((error: unknown) => {
        if (isTransientDatabaseError(error)) return true;
        throw error;
      });
      if (!pending) return stop('empty');
    }
    await pause(settings.pollIntervalMs, options);
  }
}

/** A counting semaphore: at most `limit` holders at once, the rest wait in arrival order. */
export class Semaphore {
  private free: number;
  private readonly waiting: (() => void)[] = [];
  constructor(limit: number) {
    this.free = limit;
  }
  async run<T>(fn: () => Promise<T>): Promise<T> {
    if (this.free > 0) this.free--;
    else await new Promise<void>((resolve) => this.waiting.push(resolve));
    try {
      return await fn();
    } finally {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    }
  }
}

async function pause(ms: number, options: RunRelayOptions): Promise<void> {
  const cap = options.remainingMs ? Math.max(0, options.remainingMs() - DEADLINE_MARGIN_MS) : ms;
  try {
    await sleep(Math.min(ms, cap), undefined, { signal: options.signal });
  } catch {
    // aborted: the loop sees the signal and stops
  }
}

/** True while some row is neither published nor dead-lettered (including rows in backoff or leased). */
export async function hasPending(sql: Sql): Promise<boolean> {
  const [row] = await sql<{ pending: boolean }[]>`
    select exists (select 1 from outbox where published_at is null and dead_lettered_at is null) as pending
  `;
  return row?.pending ?? false;
}
