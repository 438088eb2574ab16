/**
 * The loop: passes, one after another, in a few lanes, until stopped. It creates each pass's
 * lease, hands back the rows of a pass that failed, replaces the database connections after one
 * broke or stopped answering, and slows down under back-pressure.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import {
  ConnectionPool,
  currentSql,
  isConnectionFailure,
  isTransientDatabaseError,
  RELAY_INVOCATION_END,
  type Sql,
  withDeadline,
} from '../platform/index.ts';
import { addCounts, emptyCounts, type RelayCounts } from './counts.ts';
import { Lease, type LeaseLeftover } from './lease.ts';
import { relayAnswerTimeout, relayPass } from './pass.ts';
import { STATEMENT_DEADLINE_MS } from './pass-deadlines.ts';
import type { PassOptions, RelayDeps } from './pass-options.ts';
import { Semaphore } from './semaphore.ts';
import { abandonLease, hasPending } from './sql/index.ts';

/** What one pass did, for observers (see {@link RunRelayOptions.onPassEnd}). */
export interface PassReport {
  leaseToken: string;
  /** `performance.now()` when the pass started and when it returned or threw. */
  startedAt: number;
  endedAt: number;
  /**
   * `performance.now()` until which the pass's rows were certainly its own (the claim or its last
   * renewal, plus the lease length; the database's expiry is later). A pass never ends after it.
   */
  heldUntil: number;
  counts?: RelayCounts;
  error?: unknown;
}

/**
 * Leases of failed passes whose rows are not handed back yet. The loop hands them back, attempts
 * returned, before its next pass; the Lambda handler keeps one across invocations, so a stall that
 * outlasts an invocation is still cleaned up. A hand-back never keeps the relay from claiming: it
 * skips rows another transaction holds locked, and its failure does not fail the pass.
 */
export class UnreturnedLeases {
  /** Most leases kept; beyond it the oldest are dropped (their rows come back when the lease expires). */
  static readonly MAX = 1_000;
  /** Tries a lease gets; then it is dropped, and what is left comes back when the lease expires. */
  static readonly TRIES = 3;
  readonly #leases = new Map<string, { leftover: LeaseLeftover; tries: number }>();

  /** Remembers what `lease` may still hold (nothing to do when it holds nothing). */
  add(lease: Lease): void {
    const leftover = lease.leftover;
    if (!leftover) return;
    this.#leases.set(lease.token, { leftover, tries: 0 });
    if (this.#leases.size > UnreturnedLeases.MAX) {
      const oldest = this.#leases.keys().next().value;
      if (oldest !== undefined) this.#leases.delete(oldest);
    }
  }

  get size(): number {
    return this.#leases.size;
  }

  /**
   * Hands every remembered lease back, each statement bounded by `deadlineMs`. What a try could
   * not hand back (a row locked by another transaction, or no longer this lease's) is kept for the
   * next try, up to {@link TRIES}.
   * @returns how many rows were handed back
   * @throws the first statement's failure (the rest stay remembered)
   */
  async handBack(sql: Sql, deadlineMs = STATEMENT_DEADLINE_MS): Promise<number> {
    let rows = 0;
    for (const [token, entry] of [...this.#leases]) {
      entry.tries++;
      const last = entry.tries >= UnreturnedLeases.TRIES;
      let returned: Set<string>;
      try {
        returned = await withDeadline(
          abandonLease(sql, token, entry.leftover),
          'hand back lease',
          deadlineMs,
        );
      } catch (error) {
        if (last) this.#leases.delete(token);
        throw error;
      }
      rows += returned.size;
      const { held, attemptsBefore } = entry.leftover;
      const keep = held.flatMap((id, i) => (returned.has(id) ? [] : [i]));
      if (keep.length === 0 || last) this.#leases.delete(token);
      else
        entry.leftover = {
          held: keep.map((i) => held[i] as string),
          attemptsBefore: keep.map((i) => attemptsBefore[i] as number),
        };
    }
    return rows;
  }
}

/** Options of {@link runRelay}. */
export interface RunRelayOptions extends RelayDeps {
  /** Stops the loop after the current pass. */
  signal?: AbortSignal;
  /** One pass, then return. */
  once?: boolean;
  /**
   * Return once no row is left that a relay can claim, now or after its backoff or lease (under
   * `block`, rows waiting behind a dead letter do not count: see `countHeldBack`).
   */
  untilEmpty?: boolean;
  /**
   * Milliseconds left before the caller must return (a Lambda's `getRemainingTimeInMillis`). Each
   * pass's lease is capped to fit in it, every pass returns before it (less a margin), and the loop
   * stops claiming when no useful lease fits.
   */
  remainingMs?: () => number;
  /** Called after every pass that claimed something. */
  onPass?: (counts: RelayCounts) => void;
  /** Called after every pass, including failed ones and ones that claimed nothing. */
  onPassEnd?: (pass: PassReport) => void;
  /** Give up (rethrow) after this many transient database errors in a row. Default: never. */
  maxConsecutiveErrors?: number;
  /** Called when a pass failed with a transient database error and will be retried. */
  onTransientError?: (error: unknown, consecutive: number) => void;
  /** Leases still to hand back; pass one kept across calls (a Lambda handler does). */
  unreturned?: UnreturnedLeases;
  /**
   * Economy mode (`OUTBOX_IDLE_RETURN_SECONDS`): return (`stopReason: 'idle'`) once no pass has
   * claimed anything for this long, ms, instead of polling on; the schedule starts the next run.
   * Default: never.
   */
  idleReturnMs?: number;
}

/**
 * Why {@link runRelay} returned: `once` after its one pass, `empty` when nothing was left to claim
 * (`untilEmpty`), `idle` after `idleReturnMs` without a claim, `deadline` when no lease fits in the
 * remaining time, `aborted` by its signal.
 */
export type StopReason = 'once' | 'empty' | 'idle' | 'deadline' | 'aborted';

/** What {@link runRelay} returns: the totals of its passes, how many, and why it stopped. */
export type RelayRunResult = RelayCounts & { passes: number; stopReason: StopReason };

/** Shortest lease worth claiming with, seconds. */
const MIN_LEASE_SECONDS = RELAY_INVOCATION_END.minLeaseSeconds;
/** Time kept back at the end of an invocation for the final marks and the summary, ms. */
const DEADLINE_MARGIN_MS = RELAY_INVOCATION_END.marginMs;
/**
 * First wait after an empty claim, ms. It doubles after every further empty claim up to
 * `pollIntervalMs`: an event committed just after a burst drained waits ~10 ms, not a whole poll
 * interval, while a relay that stays quiet claims no more often than before.
 */
export const IDLE_POLL_FLOOR_MS = 10;

/**
 * The wait after the `emptyClaims`-th empty claim in a row (1 for the first): 10, 20, 40 … ms,
 * capped at `pollIntervalMs` (never below it when the setting itself is lower than the floor).
 */
export function idlePollMs(emptyClaims: number, pollIntervalMs: number): number {
  const floor = Math.min(IDLE_POLL_FLOOR_MS, pollIntervalMs);
  return Math.min(pollIntervalMs, floor * 2 ** Math.min(Math.max(0, emptyClaims - 1), 20));
}

/**
 * Relays until stopped: by `signal`, after one pass (`once`), when the outbox is drained
 * (`untilEmpty`), or when `remainingMs` can no longer cover a lease. After an empty claim it waits
 * 10 ms, doubling after every further empty claim up to `settings.pollIntervalMs` (see
 * {@link idlePollMs}), and starts from 10 ms again after a claim that found rows. Under back-pressure (throttling, a request that failed as a
 * whole) the whole loop pauses (doubling up to 2 s) rather than sending more into it. A pass that
 * failed on the database is retried after a backoff; its rows are handed back once the database
 * answers, and, given a {@link ConnectionPool}, its connections are replaced first.
 * @returns the totals and why it stopped
 * @throws a database error that is not transient, or the last transient one after
 *   `maxConsecutiveErrors`
 */
export async function runRelay(options: RunRelayOptions): Promise<RelayRunResult> {
  // Pipelining: several passes run at once (lanes), so one lane's claim and marks overlap another
  // lane's PutEvents calls. Leases keep the lanes' rows apart exactly as they keep separate relays
  // apart, and one semaphore caps the PutEvents calls in flight across lanes.
  const lanes = options.once ? 1 : Math.max(1, options.settings.pipelineDepth);
  const publishSlots = options.publishSlots ?? new Semaphore(options.settings.publishConcurrency);
  const unreturned = options.unreturned ?? new UnreturnedLeases();
  // One learned answer timeout for all lanes: they talk to the same bus.
  const answerTimeout = options.answerTimeout ?? relayAnswerTimeout(options.settings);
  const results = await Promise.all(
    Array.from({ length: lanes }, () => runLane({ ...options, publishSlots, unreturned, answerTimeout })),
  );
  const totals = emptyCounts();
  for (const r of results) addCounts(totals, r);
  const order: StopReason[] = ['aborted', 'deadline', 'once', 'idle', 'empty'];
  const stopReason = order.find((reason) => results.some((r) => r.stopReason === reason)) ?? 'empty';
  return { ...totals, passes: results.reduce((n, r) => n + r.passes, 0), stopReason };
}

async function runLane(options: RunRelayOptions & { unreturned: UnreturnedLeases }): Promise<RelayRunResult> {
  const { settings, signal, unreturned } = options;
  const pool = options.sql instanceof ConnectionPool ? options.sql : undefined;
  const totals = emptyCounts();
  let passes = 0;
  let pressurePauseMs = 0;
  let backPressureStreak = 0;
  let consecutiveErrors = 0;
  let lastClaimAt = performance.now();
  let emptyClaims = 0;
  const stop = (stopReason: StopReason) => ({ ...totals, passes, stopReason });

  for (;;) {
    if (signal?.aborted) return stop('aborted');
    let leaseSeconds = settings.leaseSeconds;
    let endBy = Number.POSITIVE_INFINITY;
    if (options.remainingMs) {
      const remaining = options.remainingMs();
      leaseSeconds = Math.min(leaseSeconds, Math.floor((remaining - DEADLINE_MARGIN_MS) / 1000));
      if (leaseSeconds < MIN_LEASE_SECONDS) return stop('deadline');
      endBy = performance.now() + remaining - DEADLINE_MARGIN_MS;
    }
    const generation = pool?.generation ?? 0;
    let counts: RelayCounts;
    try {
      counts = await passWithLease(options, leaseSeconds, unreturned, { endBy, backPressureStreak });
      consecutiveErrors = 0;
    } catch (error) {
      if (!isTransientDatabaseError(error)) throw error;
      // A broken or silent connection may leave driver state behind that never recovers (see
      // ConnectionPool): start again with fresh connections.
      if (isConnectionFailure(error)) pool?.replace(generation);
      consecutiveErrors++;
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

    // Back-pressure means the account's PutEvents rate is exhausted or the service is failing:
    // slow the whole loop down (doubling from 50 ms up to 2 s) instead of sending more into it,
    // and speed back up by halving the pause after every pass without back-pressure.
    if (counts.backPressure > 0) {
      backPressureStreak++;
      pressurePauseMs = Math.min(2_000, Math.max(50, pressurePauseMs * 2));
      await pause(pressurePauseMs, options);
      continue;
    }
    backPressureStreak = 0;
    pressurePauseMs = Math.floor(pressurePauseMs / 2);
    if (counts.claimed > 0) {
      lastClaimAt = performance.now();
      emptyClaims = 0;
      continue;
    }
    emptyClaims++;
    // Economy: a quiet relay returns rather than bill its invocation's remaining time for polls
    // that find nothing; the lag of an event that arrives after it is up to one schedule period.
    if (options.idleReturnMs !== undefined && performance.now() - lastClaimAt >= options.idleReturnMs)
      return stop('idle');
    if (options.untilEmpty) {
      const pending = await withDeadline(
        hasPending(currentSql(options.sql), settings),
        'pending check',
        STATEMENT_DEADLINE_MS,
      ).catch((error: unknown) => {
        if (isTransientDatabaseError(error)) return true;
        throw error;
      });
      if (!pending) return stop('empty');
    }
    // Back off from 10 ms: right after a burst the next event is likely close (lanes that found
    // nothing while another lane drained), while a quiet relay settles at the poll interval.
    await pause(idlePollMs(emptyClaims, settings.pollIntervalMs), options);
  }
}

/**
 * One pass under a lease of its own, the step every relay repeats: first the rows of earlier
 * failed passes are handed back (bounded by the time left), then {@link relayPass} runs; when it
 * fails, what its lease still holds joins `unreturned`, to be handed back (attempt returned) as
 * soon as the database answers. Reports the pass to `onPassEnd`.
 * @param leaseSeconds this pass's lease, seconds
 * @throws what {@link relayPass} throws, or a hand-back's error that is not transient
 */
export async function passWithLease(
  options: RelayDeps & Pick<RunRelayOptions, 'onPassEnd'>,
  leaseSeconds: number,
  unreturned: UnreturnedLeases,
  passOptions: Omit<PassOptions, 'claim' | 'checkpoint'> = {},
): Promise<RelayCounts> {
  const endBy = passOptions.endBy ?? Number.POSITIVE_INFINITY;
  const lease = new Lease(leaseSeconds);
  const startedAt = performance.now();
  const report = (outcome: { counts: RelayCounts } | { error: unknown }) =>
    options.onPassEnd?.({
      leaseToken: lease.token,
      startedAt,
      endedAt: performance.now(),
      heldUntil: lease.heldUntil,
      ...outcome,
    });
  try {
    if (unreturned.size > 0) {
      // A hand-back that failed is tried again before the next pass; this one claims anyway.
      await unreturned
        .handBack(currentSql(options.sql), Math.min(STATEMENT_DEADLINE_MS, endBy - performance.now()))
        .catch((error: unknown) => {
          if (!isTransientDatabaseError(error)) throw error;
        });
    }
    const counts = await relayPass(options, lease, passOptions);
    report({ counts });
    return counts;
  } catch (error) {
    report({ error });
    // The rows the pass still held go back (attempt returned) once the database answers: a
    // dropped or stalled connection is not the events' fault.
    unreturned.add(lease);
    throw error;
  }
}

/**
 * One pass with a lease of its own, for callers without a loop (tests, tools): {@link passWithLease}
 * then, when the pass failed, its rows handed back at once if the database answers.
 * @param leaseSeconds lease for this pass; defaults to `settings.leaseSeconds`
 * @throws what {@link relayPass} throws
 */
export async function relayOnce(
  deps: RelayDeps,
  leaseSeconds = deps.settings.leaseSeconds,
): Promise<RelayCounts> {
  const unreturned = new UnreturnedLeases();
  try {
    return await passWithLease(deps, leaseSeconds, unreturned);
  } catch (error) {
    await unreturned.handBack(currentSql(deps.sql)).catch(() => {});
    throw error;
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
