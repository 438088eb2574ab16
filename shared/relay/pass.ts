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
 * SDK retries included, is aborted at a budget (at most `maxCallMs`: 10 s, or the lease less 3 s
 * when longer) that leaves the invocation time to
 * mark its outcome, and waiting for a call's slot ends when the watchdog fires. A pass renews its
 * lease once a quarter of it has gone by, before a round and while the round's calls are
 * outstanding, so a live pass keeps its rows through a call longer than its lease, while a dead
 * relay's rows come back one short lease after its last renewal.
 */
import {
  compareInt8,
  currentSql,
  keepsPublishedHistory,
  type OutboxDeadlineError,
  type RelaySettings,
  type Sql,
} from '../platform/index.ts';
import { AnswerTimeout } from './answer-timeout.ts';
import { backoffDelayMs } from './backoff.ts';
import {
  type EntryOutcome,
  eventBridgePublisher,
  isNoAnswer,
  type Publisher,
  type PublishRequest,
  tracedPublisher,
} from './buses/index.ts';
import { emptyCounts, type RelayCounts } from './counts.ts';
import type { Lease } from './lease.ts';
import {
  LEASE_SAFETY_MS,
  MARK_RESERVE_MS,
  MIN_CALL_MS,
  maxCallMs,
  RENEW_AFTER_SHARE,
  Watchdog,
} from './pass-deadlines.ts';
import type { PassCheckpoint, PassOptions, RelayDeps } from './pass-options.ts';
import { mapWithConcurrency } from './semaphore.ts';
import {
  type ClaimOptions,
  claimBatchKept,
  type Failure,
  markPublished,
  outboxIdOf,
  readOutboxId,
  recordFailures,
  releaseUnsent,
  renewLease,
  startRound,
  type UnsentRow,
  unparkNextEvents,
} from './sql/index.ts';
import type { ClaimedEvent } from './types.ts';

/**
 * One claim-publish-mark pass under `lease` (created by the caller, which hands the lease's rows
 * back if the pass fails: see {@link Lease.leftover}). Its steps are {@link Pass}'s methods.
 * @throws transient database errors ({@link OutboxDeadlineError} when a statement or the pass ran
 *   out of time); the rows the lease still holds are then the caller's to hand back
 */
export async function relayPass(
  deps: RelayDeps,
  lease: Lease,
  options: PassOptions = {},
): Promise<RelayCounts> {
  const pass = new Pass(deps, lease, options);
  try {
    const events = await pass.claim();
    if (events.length === 0) return pass.counts;
    await pass.checkpoint('claimed');
    pass.queue(events);
    pass.handBackOrphans();
    await pass.deadLetterExhausted();
    while (pass.hasQueued()) {
      if (!(await pass.roundFits())) {
        // Too little time left to send and mark safely: hand the rest back untouched.
        pass.stopAll();
        break;
      }
      await pass.checkpoint('round');
      const round = await pass.startRound();
      const outcomes = await pass.publish(round.events);
      // The lease is about to run out (a statement or the bus held the pass up): whatever this
      // round sent is unknown, so the pass fails and the caller hands its rows back.
      pass.throwIfOutOfTime();
      await pass.checkpoint('sent');
      await pass.settle(outcomes, round.failures, round.exhausted);
    }
    await pass.checkpoint('finishing');
    await pass.finish(events);
    return pass.counts;
  } finally {
    pass.dispose();
  }
}

/** An event of a round with what the bus answered for it. */
interface SentEvent {
  event: ClaimedEvent;
  outcome: EntryOutcome;
}

/** The state of one pass and its steps, in the order {@link relayPass} runs them. */
class Pass {
  readonly counts = emptyCounts();
  readonly #deps: RelayDeps;
  readonly #settings: RelaySettings;
  readonly #lease: Lease;
  readonly #options: PassOptions;
  readonly #watchdog: Watchdog;
  readonly #endBy: number;
  readonly #random: () => number;
  readonly #answerTimeout: AnswerTimeout;
  readonly #publisher: Publisher;
  /** Aggregates that must send nothing more this pass → ms before their next event may go. */
  readonly #stopped = new Map<string, number>();
  /**
   * Per aggregate, the claimed events not yet sent, in sequence order. With ordering `none` every
   * event is a queue of its own, so everything goes in the first round.
   */
  readonly #queues = new Map<string, ClaimedEvent[]>();
  /** Unsent rows to hand back with the next marks (or at the end of the pass). */
  readonly #toRelease: UnsentRow[] = [];

  constructor(deps: RelayDeps, lease: Lease, options: PassOptions) {
    this.#deps = deps;
    this.#settings = deps.settings;
    this.#lease = lease;
    this.#options = options;
    this.#endBy = options.endBy ?? Number.POSITIVE_INFINITY;
    this.#watchdog = new Watchdog(lease, this.#endBy);
    this.#random = deps.random ?? Math.random;
    this.#answerTimeout = deps.answerTimeout ?? relayAnswerTimeout(deps.settings);
    this.#publisher = tracedPublisher(deps.publisher ?? classicPublisher(deps));
  }

  #sql(): Sql {
    return currentSql(this.#deps.sql);
  }

  #keyOf(event: ClaimedEvent): string {
    return this.#settings.ordering === 'none' ? event.id : aggregateKey(event);
  }

  /** Awaits the caller's {@link PassOptions.checkpoint}, if any. */
  async checkpoint(at: PassCheckpoint): Promise<void> {
    await this.#options.checkpoint?.(at);
  }

  /**
   * Claims a leased batch (the watchdog armed first: nothing outlives the lease). The claim
   * commits only if its answer arrives before the pass gives up on it; the lease then knows its
   * rows (see {@link claimBatchKept}).
   */
  async claim(): Promise<ClaimedEvent[]> {
    const settings = this.#settings;
    this.#lease.claimSending();
    this.#watchdog.arm();
    const claimOptions: ClaimOptions = {
      leaseToken: this.#lease.token,
      leaseSeconds: this.#lease.seconds,
      batchSize: settings.batchSize,
      perAggregateLimit: settings.perAggregateLimit,
      ordering: settings.ordering,
      deadLetterPolicy: settings.deadLetterPolicy,
    };
    let gaveUp: unknown;
    const keep = (events: ClaimedEvent[]) => {
      if (gaveUp) throw gaveUp;
      this.#lease.claimed(events);
    };
    const events = await this.#watchdog
      .statement(
        'claim',
        this.#options.claim
          ? this.#options.claim(claimOptions, keep)
          : claimBatchKept(this.#sql(), claimOptions, keep),
      )
      .catch((error: unknown) => {
        gaveUp = error;
        throw error;
      });
    this.counts.claimed = events.length;
    if (events.length > 0) {
      // Read once per pool (sql/outbox-identity.ts): no round trip after a process's first claim.
      const sql = this.#sql();
      const outboxId = await this.#watchdog.statement(
        'outbox id',
        outboxIdOf(this.#deps.sql, () => readOutboxId(sql)),
      );
      if (outboxId !== undefined) for (const event of events) event.outboxId = outboxId;
    }
    return events;
  }

  /** Queues the claimed events per aggregate, in sequence order. */
  queue(events: ClaimedEvent[]): void {
    for (const event of [...events].sort((a, b) => compareInt8(a.sequence, b.sequence))) {
      const queue = this.#queues.get(this.#keyOf(event));
      if (queue) queue.push(event);
      else this.#queues.set(this.#keyOf(event), [event]);
    }
  }

  hasQueued(): boolean {
    return this.#queues.size > 0;
  }

  /**
   * Stops an aggregate: its unsent events are handed back, to go no earlier than `notBeforeMs`,
   * with the attempt returned where one was spent (a head; a successor spent none).
   */
  #stop(key: string, notBeforeMs: number): void {
    this.#stopped.set(key, notBeforeMs);
    for (const e of this.#queues.get(key) ?? [])
      if (this.#lease.held.has(e.id))
        this.#toRelease.push({ id: e.id, notBeforeMs, giveBackAttempt: this.#lease.spent.has(e.id) });
    this.#queues.delete(key);
  }

  /** Stops every aggregate still queued (their events go back untouched). */
  stopAll(): void {
    for (const key of [...this.#queues.keys()]) this.#stop(key, 0);
  }

  /**
   * Successors without their head: the head changed under the claim's lock (another writer
   * touched it in that instant) and was not leased. Sending the successors would overtake it, so
   * they are handed straight back.
   */
  handBackOrphans(): void {
    for (const [key, queue] of this.#queues) {
      if (queue[0] && !queue[0].isHead) this.#stop(key, 0);
    }
  }

  /**
   * A row claimed more often than allowed never got an outcome recorded: it crashed the relay or
   * outlived its lease each time. Dead-letter it instead of trying again (attempts are counted at
   * claim precisely so that such a row cannot loop forever).
   */
  async deadLetterExhausted(): Promise<void> {
    const { maxAttempts } = this.#settings;
    const exhausted: Failure[] = [];
    const events = new Map<string, ClaimedEvent>();
    for (const [key, queue] of this.#queues) {
      const head = queue[0];
      if (head && head.attempts > maxAttempts) {
        exhausted.push(exhaustedFailure(head, maxAttempts));
        events.set(head.id, head);
        queue.shift();
        this.#stop(key, 0);
      }
    }
    if (exhausted.length === 0) return;
    const recorded = await this.#watchdog.statement(
      'dead-letter exhausted',
      recordFailures(this.#sql(), this.#lease.token, exhausted),
    );
    this.#lease.settled(exhausted.map((f) => f.id));
    this.#countRecorded(exhausted, recorded, events);
  }

  /**
   * Counts the failures a write recorded, and reports them to `onFailure`; the rest were lost to
   * another relay (`leaseLost`), whose outcome they now are.
   */
  #countRecorded(
    failures: readonly Failure[],
    recorded: Set<string>,
    events: Map<string, ClaimedEvent>,
  ): void {
    for (const failure of failures) {
      if (!recorded.has(failure.id)) {
        this.counts.leaseLost++;
        continue;
      }
      if (failure.deadLetter) this.counts.deadLettered++;
      else this.counts.retried++;
      const event = events.get(failure.id);
      if (event)
        this.#deps.onFailure?.({
          eventId: event.eventId,
          reason: failure.error,
          deadLettered: failure.deadLetter,
        });
    }
  }

  /**
   * Renews the lease when a quarter of it has gone by, or when what it leaves would not hold a
   * round (a short lease), then says whether a round still fits before the watchdog fires.
   */
  async roundFits(): Promise<boolean> {
    const short = this.#watchdog.leftMs() < MARK_RESERVE_MS + MIN_CALL_MS;
    if (this.#renewalWorthIt() && (short || this.#renewalDue())) await this.#renew();
    return this.#watchdog.leftMs() >= MARK_RESERVE_MS + MIN_CALL_MS;
  }

  /** Whether a renewal is due: a quarter of the lease has gone by. */
  #renewalDue(): boolean {
    return this.#lease.leftMs() < this.#lease.ms * (1 - RENEW_AFTER_SHARE);
  }

  /** Whether a renewal would gain anything: rows are held and the invocation outlasts the watchdog. */
  #renewalWorthIt(): boolean {
    return this.#lease.held.size > 0 && this.#endBy > this.#lease.heldUntil - LEASE_SAFETY_MS;
  }

  /**
   * Renews the lease on the rows still held and re-arms the watchdog. Rows the renewal found taken
   * (the lease had run out, which the watchdog should have prevented) are settled as lost and stop
   * their aggregates.
   */
  async #renew(): Promise<void> {
    const lease = this.#lease;
    const secured = lease.renewalSending();
    const held = [...lease.held];
    const kept = await this.#watchdog.statement(
      'renew lease',
      renewLease(this.#sql(), lease.token, held, lease.seconds),
    );
    secured();
    this.#watchdog.arm();
    this.counts.leaseRenewals++;
    const lost = held.filter((id) => !kept.has(id));
    if (lost.length > 0) {
      lease.settled(lost);
      this.counts.leaseLost += lost.length;
      for (const [key, queue] of [...this.#queues])
        if (queue.some((e) => !kept.has(e.id))) this.#stop(key, 0);
    }
  }

  /**
   * Renews the lease whenever due (a quarter of it gone) while a round's calls are waiting for
   * a slot or for the bus: a call may outlast the lease (up to 10 s against a default 8 s lease),
   * and the lease stays short so that a dead relay's rows come back fast. A renewal that fails
   * ends the keeping; the watchdog then fires at the end of the lease last secured.
   * @returns stops the keeping, once a renewal in flight has ended
   */
  #keepLease(): () => Promise<void> {
    let stopped = false;
    let timer: NodeJS.Timeout | undefined;
    let renewing: Promise<void> | undefined;
    const schedule = () => {
      const dueInMs = this.#lease.leftMs() - this.#lease.ms * (1 - RENEW_AFTER_SHARE);
      timer = setTimeout(tick, Math.max(0, dueInMs));
    };
    const tick = () => {
      // Nothing held, or the invocation ends before the lease: renewing would gain nothing.
      if (stopped || this.#watchdog.signal.aborted || !this.#renewalWorthIt()) return;
      // A timer may fire a little early.
      if (!this.#renewalDue()) return schedule();
      renewing = this.#renew().then(
        () => {
          renewing = undefined;
          if (!stopped) schedule();
        },
        () => {
          renewing = undefined;
        },
      );
    };
    schedule();
    return async () => {
      stopped = true;
      clearTimeout(timer);
      await renewing;
    };
  }

  /**
   * Takes the next round (the next event of every queued aggregate) and starts it. Successors
   * start their publication now, and spend their attempt now: not at claim, where a relay that
   * died while sending the head would have charged them for it. A successor this lease no longer
   * owns is not sent; one over its attempts (started that often, each ending without an outcome)
   * is dead-lettered instead of sent, as an exhausted head is.
   * @returns the events to send, and the dead-lettered successors (and their failures) to record
   *   with the round's outcomes
   */
  async startRound(): Promise<{ events: ClaimedEvent[]; failures: Failure[]; exhausted: ClaimedEvent[] }> {
    let round: ClaimedEvent[] = [];
    for (const queue of this.#queues.values()) round.push(queue.shift() as ClaimedEvent);
    for (const [key, queue] of this.#queues) if (queue.length === 0) this.#queues.delete(key);

    const successors = round.filter((e) => !e.isHead);
    const failures: Failure[] = [];
    const exhausted: ClaimedEvent[] = [];
    if (successors.length === 0) return { events: round, failures, exhausted };
    const started = await this.#watchdog.statement(
      'start round',
      startRound(
        this.#sql(),
        this.#lease.token,
        successors.map((e) => e.id),
      ),
    );
    await this.checkpoint('started');
    this.#lease.started(started.keys());
    const skip = new Set<string>();
    for (const event of successors) {
      const attempts = started.get(event.id);
      if (attempts === undefined) {
        this.#lease.settled([event.id]);
        this.counts.leaseLost++;
        skip.add(event.id);
        this.#stop(this.#keyOf(event), 0);
        continue;
      }
      event.attempts = attempts;
      if (attempts > this.#settings.maxAttempts) {
        // counted once it is written (see settle): the lease may be lost before that
        failures.push(exhaustedFailure(event, this.#settings.maxAttempts));
        exhausted.push(event);
        skip.add(event.id);
        this.#stop(this.#keyOf(event), 0);
      }
    }
    if (skip.size > 0) round = round.filter((e) => !skip.has(e.id));
    return { events: round, failures, exhausted };
  }

  /**
   * Sends a round's events, packed into requests, `publishConcurrency` requests at a time, the
   * lease renewed while they wait for a slot or an answer.
   */
  async publish(round: ClaimedEvent[]): Promise<SentEvent[]> {
    const requests = this.#publisher.pack(round);
    this.counts.putEventsCalls += requests.length;
    const stopKeeping = this.#keepLease();
    try {
      const outcomes = await mapWithConcurrency(
        requests,
        this.#settings.publishConcurrency,
        async (request) => {
          const results = await this.#sendInSlot(request);
          return request.events.map((event, i) => ({ event, outcome: results[i] as EntryOutcome }));
        },
      );
      return outcomes.flat();
    } finally {
      await stopKeeping();
    }
  }

  /**
   * {@link #send} once a slot of `publishSlots` is free. The wait ends when the watchdog fires:
   * the entries are then not sent (the pass is over and hands them back).
   */
  async #sendInSlot(request: PublishRequest): Promise<EntryOutcome[]> {
    const slots = this.#deps.publishSlots;
    if (!slots) return this.#send(request);
    const signal = this.#watchdog.signal;
    try {
      return await slots.run(() => this.#send(request), signal);
    } catch (error) {
      if (signal.aborted && error === signal.reason) return request.events.map(() => notSent());
      throw error;
    }
  }

  /**
   * One PutEvents call, SDK retries included, bounded by `maxCallMs` (the lease's) and by what the
   * invocation leaves for marking its outcome; the lease is renewed meanwhile (see
   * {@link #keepLease}), and the watchdog aborts the call if the lease cannot be. An attempt that
   * waited the answer timeout's ceiling (or, when the invocation capped the call, all of it and at
   * least 10 s: `AnswerTimeout.longestWait`) and got no answer is not back-pressure: the bus answers
   * slower than the relay may wait, so the entries spend their attempt and dead-letter after
   * `maxAttempts` rather than re-sending forever.
   */
  async #send(request: PublishRequest): Promise<EntryOutcome[]> {
    const watchdog = this.#watchdog;
    if (watchdog.signal.aborted) return request.events.map(() => notSent());
    // Measured when the call starts (after waiting for a slot).
    const budget = Math.min(
      maxCallMs(this.#settings.leaseSeconds),
      this.#endBy - performance.now() - MARK_RESERVE_MS,
    );
    const call = watchdog.callSignal(Math.max(0, Math.floor(budget)));
    // Each attempt waits what the bus's recent answers ask for, within the call's budget.
    const attemptMs = this.#answerTimeout.forCall(budget);
    const callStarted = performance.now();
    let results: EntryOutcome[] | undefined;
    try {
      results = await this.#publisher.put(request, call.signal, attemptMs);
      const first = results[0];
      const longest = this.#answerTimeout.longestWait(attemptMs, budget);
      if (first && isNoAnswer(first) && !watchdog.signal.aborted && longest)
        return results.map(() => slowerThanLease(attemptMs, longest));
      return results;
    } finally {
      call.release();
      const took = performance.now() - callStarted;
      this.counts.putEventsMs += took;
      const first = results?.[0];
      if (first && isNoAnswer(first)) {
        // Aborted by the watchdog, the pass is over; otherwise the attempt (or the call's
        // budget) ran out before the bus answered: the next call may wait longer.
        if (!watchdog.signal.aborted) this.#answerTimeout.timedOut();
      } else if (first) this.#answerTimeout.answered(took);
    }
  }

  /** Throws the watchdog's reason when it fired during the round's calls. */
  throwIfOutOfTime(): void {
    if (this.#watchdog.signal.aborted) throw this.#watchdog.signal.reason;
  }

  /**
   * Records a round's outcomes: published rows marked, failures retried with backoff or
   * dead-lettered, and the rest of each failed aggregate handed back. Marked before the next
   * round is sent: an event is recorded as published before its successor leaves, which keeps
   * re-publication after a crash to the events that need it. Failures are counted (and reported)
   * once written: a row whose lease was lost meanwhile is the new owner's outcome.
   * @param exhausted the successors `startRound` dead-lettered, whose failures are `roundFailures`
   */
  async settle(sent: SentEvent[], roundFailures: Failure[], exhausted: ClaimedEvent[]): Promise<void> {
    const publishedIds: string[] = [];
    const failures: Failure[] = roundFailures;
    const events = new Map(exhausted.map((e) => [e.id, e]));
    for (const { event, outcome } of sent) {
      // Lost to another relay while the call was out (a renewal found it taken): not ours to write.
      if (!this.#lease.held.has(event.id)) continue;
      if (outcome.ok) {
        publishedIds.push(event.id);
        continue;
      }
      const failure = this.#failureOf(event, outcome);
      failures.push(failure);
      events.set(event.id, event);
      // The rest of this aggregate's claim is handed back now (not at the end of the pass, when the
      // backoff may already have run out and another relay claimed the aggregate): behind a retry
      // it waits for the backoff; behind a dead letter (`continue`) it may go at once.
      this.#stop(this.#keyOf(event), failure.deadLetter ? 0 : failure.retryInMs);
    }
    const token = this.#lease.token;
    const releasing = this.#toRelease.splice(0);
    const [marked, failed, released] = await Promise.all([
      this.#watchdog.statement(
        'mark published',
        markPublished(
          this.#sql(),
          token,
          publishedIds,
          keepsPublishedHistory(this.#settings) ? 'keep' : 'delete',
        ),
      ),
      this.#watchdog.statement('record failures', recordFailures(this.#sql(), token, failures)),
      this.#watchdog.statement('release unsent', releaseUnsent(this.#sql(), token, releasing)),
    ]);
    this.#lease.settled([...publishedIds, ...failures.map((f) => f.id), ...releasing.map((r) => r.id)]);
    this.counts.published += marked;
    this.counts.released += released;
    this.counts.leaseLost += publishedIds.length - marked + (releasing.length - released);
    this.#countRecorded(failures, failed, events);
  }

  /** What a refused entry gets: a retry after its backoff, or a dead letter. */
  #failureOf(event: ClaimedEvent, outcome: Exclude<EntryOutcome, { ok: true }>): Failure {
    const settings = this.#settings;
    if (outcome.throttled) this.counts.throttled++;
    if (outcome.backPressure) {
      // Not the entry's fault: its attempt is given back, and it waits out a backoff that
      // grows with how long the pressure has lasted rather than with its own attempts.
      this.counts.backPressure++;
      const streak = Math.max(event.attempts, (this.#options.backPressureStreak ?? 0) + 1);
      return {
        id: event.id,
        error: `${outcome.code}: ${outcome.message}`,
        deadLetter: false,
        retryInMs: backoffDelayMs(streak, settings.backoffBaseMs, settings.backoffMaxMs, this.#random),
        giveBackAttempt: true,
      };
    }
    const deadLetter = outcome.permanent || event.attempts >= settings.maxAttempts;
    return {
      id: event.id,
      error: `${outcome.code}: ${outcome.message}`,
      deadLetter,
      retryInMs: deadLetter
        ? 0
        : backoffDelayMs(event.attempts, settings.backoffBaseMs, settings.backoffMaxMs, this.#random),
    };
  }

  /**
   * Hands back what is left, then, with per-aggregate ordering, unparks the next event of every
   * aggregate whose claimed events are all settled (published, or dead-lettered and so out of the
   * way). Aggregates in backoff stay parked behind it.
   */
  async finish(events: ClaimedEvent[]): Promise<void> {
    const releasing = this.#toRelease.splice(0);
    if (releasing.length > 0) {
      const released = await this.#watchdog.statement(
        'release unsent',
        releaseUnsent(this.#sql(), this.#lease.token, releasing),
      );
      this.#lease.settled(releasing.map((r) => r.id));
      this.counts.released += released;
      this.counts.leaseLost += releasing.length - released;
    }
    if (this.#settings.ordering !== 'aggregate') return;
    const settled = new Map<string, { aggregateType: string; aggregateId: string }>();
    for (const e of events) {
      const key = aggregateKey(e);
      if ((this.#stopped.get(key) ?? 0) === 0 && !settled.has(key)) {
        settled.set(key, { aggregateType: e.aggregateType, aggregateId: e.aggregateId });
      }
    }
    await this.#watchdog.statement(
      'unpark next events',
      unparkNextEvents(this.#sql(), [...settled.values()]),
    );
  }

  dispose(): void {
    this.#watchdog.dispose();
  }
}

/** The outcome of an entry never sent: the watchdog fired before its call could start. */
/** The classic bus through `deps.client`, when no publisher was given. */
function classicPublisher(deps: RelayDeps): Publisher {
  if (!deps.client)
    throw new TypeError('the relay needs a publisher or an EventBridge client (RelayDeps.client)');
  return eventBridgePublisher(deps.client, deps.settings);
}

/**
 * The outcome of an entry whose attempt waited the longest the lease allows and got no answer: the
 * entry's own failure (it spends its attempt), so that a bus no lease can wait for ends in dead
 * letters after `maxAttempts`, not in an endless loop of re-sends.
 */
function slowerThanLease(waitedMs: number, longest: 'ceiling' | 'capped'): EntryOutcome {
  return {
    ok: false,
    code: 'PutEventsTimeoutError',
    message:
      longest === 'ceiling'
        ? `no answer from the bus within ${waitedMs} ms, the longest an attempt may wait under OUTBOX_LEASE_SECONDS (the lease less 3 s, at least 10 s): raise the lease for a bus this slow`
        : `no answer from the bus within ${waitedMs} ms, all the invocation left for the call (the relay's timeout less 4.5 s caps each call below the lease's ceiling): raise the relay's timeout with the lease for a bus this slow`,
    permanent: false,
    throttled: false,
    backPressure: false,
  };
}

/** The relay's answer timeout: its ceiling is the longest call the lease allows ({@link maxCallMs}). */
export function relayAnswerTimeout(settings: Pick<RelaySettings, 'leaseSeconds'>): AnswerTimeout {
  return new AnswerTimeout({ ceilingMs: maxCallMs(settings.leaseSeconds) });
}

function notSent(): EntryOutcome {
  return {
    ok: false,
    code: 'AbortError',
    message: 'not sent: the pass ran out of time before a PutEvents slot was free',
    permanent: false,
    throttled: false,
    backPressure: true,
  };
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
