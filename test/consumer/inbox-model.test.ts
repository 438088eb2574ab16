/**
 * Model-based test of the consumer side (fast-check `fc.commands`): an inbox consumer fed as
 * EventBridge and Lambda feed it — events produced on a few aggregates by two sources and of two
 * types, numbered as the producer numbers them (per aggregate, across sources), some never
 * delivered (dead-lettered at the relay), delivered in any order, delivered again (duplicates, at
 * once or later), retried on Lambda's schedule when the invocation fails (attempts at about 0, 60
 * and 180 s, or 0 and 60 s with one retry, then the on-failure destination), retries that come
 * late or never reach the inbox (the database unreachable), every due attempt at once (a burst's
 * last attempts), replayed from that destination by an operator, and parked events re-applied —
 * with the inbox alone or inside a middy chain whose `onError` answers success for every failure —
 * against the real inbox and Postgres. Time is the database's: `advance` back-dates the inbox's
 * timestamps.
 *
 * Each run picks an order mode (none, ignore-stale, wait-for-gap processing or parking after the
 * wait), whether the consumer receives every type or declares the one it receives (`types`),
 * Lambda's retries (2, the default, or 1), and `parkAfterAttempts` (off, 1, 2 or 3: an event whose
 * handler failed that many times is parked holding its aggregate; it must never be parked before
 * its handler failed that often, whatever gap retries it had, and its aggregate's held events are
 * replayed in order at the end).
 *
 * Invariant, after every command: each event is applied at most once; an applied event is recorded
 * `processed`; an event acknowledged without being applied is recorded with a reason (stale,
 * parked); every invocation that succeeded left a record of its event; every event in the failure
 * destination has a reason; an event applied as `next` came after the event before it in its chain
 * was taken; under wait-for-gap, an attempt fails with InboxGapError only while its wait (from its
 * first attempt, however late its retries) is not over, an event is taken past its gap only once
 * it is, and of the attempts made at once, an event waiting behind a gap is never taken after a
 * higher one of its chain. At the end the system is healed (every retry run, every failure and parked event
 * replayed, with the handler fixed) and each event delivered must have been applied exactly once —
 * or, under ignore-stale only, recorded stale behind a later event of its chain that was applied,
 * and counted in the InboxStale metric.
 *
 * Runs: `npm test` runs INBOX_MODEL_RUNS (default 60) sequences (about 20 s on a busy 2-core
 * machine); `npm run test:inbox-model -- --runs 10000 --seed 42` runs a long one. A failure prints
 * fast-check's seed, path and shrunk command sequence, and the attempts of the shrunk run with
 * their outcomes. INBOX_MODEL_STATS=1 prints, for each run, its configuration and outcome counts.
 *
 * Shown to fail: with the late event dropped as stale again (item 2), the first failing run shrinks
 * to two events of one aggregate, the first failing until the end, and a 30 s wait; with parking
 * not moving its chain on (item 1), to a parked event whose successor then waits for it; with an
 * InboxGapError counted as a handler failure (issue 46, item 2), to #2 of an aggregate whose #1
 * never reached the inbox, parked for its handler's failures after 0 of them (parkAfterAttempts 2,
 * wait-for-gap: 60 runs, seed -1353949233); with each handler failure counted twice in its trace,
 * to an event failing once under a swallowing middleware and parked on its next failure
 * (parkAfterAttempts 2: 150 runs, seed -1282648755, after 5).
 *
 * The model's own bookkeeping, found by CI's random seed -1107957182 (60 runs, after 54): a
 * delivery that answered `replayed` (an event marked for replay whose replay failed under the
 * swallowing middleware, applied by its next delivery) was not counted as taken, so its
 * successor's `next` read as out of order.
 */
import { randomUUID } from 'node:crypto';
import middy from '@middy/core';
import type { EventBridgeEvent } from 'aws-lambda';
import fc from 'fast-check';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { type InboxOptions, inbox } from '../../shared/consumer/index.ts';
import { markParkedForReplay } from '../../shared/consumer/operations/parked-events.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

const RUNS = Number(process.env.INBOX_MODEL_RUNS ?? 60);
const SEED = process.env.INBOX_MODEL_SEED === undefined ? undefined : Number(process.env.INBOX_MODEL_SEED);
const SOURCES = ['shop.a', 'shop.b'] as const;
const AGGREGATES = ['x', 'y'] as const;
const TYPES = ['A', 'B'] as const;
/** Lambda's asynchronous retries: the 2nd attempt about 60 s after the 1st, the 3rd 120 s after that. */
const RETRY_DELAYS = [60, 120];
/** The inbox's settings for each retry count: `retryWindowSeconds` and `gapWaitSeconds`. */
const WINDOWS = {
  2: { retryWindowSeconds: 180, gapWaitSeconds: 120 },
  1: { retryWindowSeconds: 60, gapWaitSeconds: 50 },
};
/** Lambda's maximum event age (the default): a retry never comes later. */
const MAX_EVENT_AGE = 21_600;

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ max: 4 });
  await db.sql`create table effect (id serial primary key, event_id text not null, arrival text not null)`;
});
afterAll(async () => {
  await db?.drop();
});

type Mode = 'none' | 'ignore-stale' | 'process' | 'park';
interface Config {
  mode: Mode;
  /** The consumer declares `types: ['A']` and its rule delivers A only. */
  subset: boolean;
  newestFirst: boolean;
  /** The function's MaximumRetryAttempts. */
  retries: 1 | 2;
  /**
   * The inbox as the handler of a middy chain whose `onError` answers for every failure (a
   * response shaper): Lambda then sees success, and only the inbox's failure trace (`inbox_failed`)
   * tells the operator, who replays from it at the end.
   */
  swallowing: boolean;
  /**
   * The inbox's `parkAfterAttempts` (issue 46, item 2), or undefined (off): an event whose handler
   * failed that many times is parked holding its aggregate, whose later events park behind it.
   */
  parkAfterAttempts: number | undefined;
}

interface ModelEvent {
  eventId: string;
  source: string;
  aggregateId: string;
  type: string;
  sequence: number;
  typeSequence: number;
  /** Dead-lettered at the relay: numbered, never delivered. */
  lost: boolean;
  delivery: EventBridgeEvent<string, unknown>;
}

interface Invocation {
  id: number;
  event: ModelEvent;
  attempts: number;
  /** Model clock (s) when its next attempt is due. */
  dueAt: number;
  done: boolean;
  succeeded: boolean;
}

interface Model {
  config: Config;
  clock: number;
  events: ModelEvent[];
  counters: Map<string, { sequence: number; types: Map<string, number> }>;
  invocations: Invocation[];
  /** The on-failure destination: the event and the reason Lambda's record carries. */
  failed: { event: ModelEvent; reason: string }[];
  /** Order in which events were taken by their chain (applied next/ahead, or parked), for the order check. */
  taken: string[];
  /** What each attempt came to, for a failing run's report. */
  log: string[];
  metrics: Map<string, number>;
  /** Events of invocations whose failure an outer middleware answered for with a success. */
  swallowed: ModelEvent[];
  /** Per event, when it was first and last seen waiting for its gap (model clock), as the inbox keeps it. */
  waiting: Map<string, { first: number; last: number }>;
  /** parkAfterAttempts: per event, its handler's failures since it was last parked. */
  handlerFailures: Map<string, number>;
  /**
   * Events parked by a delivery and not re-applied by the operator since: a later delivery of one
   * (a redelivery, a replay) is answered `parked` again without waiting or being counted (issue 45,
   * item 4), so it is no new park.
   */
  parked: Set<string>;
  /** Parks the model saw (first ones only), for the InboxParked count. */
  parks: number;
}

/** parkAfterAttempts: the outcome of the event's record before an attempt (undefined: none, or off). */
async function outcomeOf(m: Model, e: ModelEvent): Promise<string | undefined> {
  if (m.config.parkAfterAttempts === undefined) return undefined;
  const [row] = await db.sql<{ outcome: string }[]>`
    select outcome from inbox_message where consumer = 'model' and event_id = ${e.eventId}`;
  return row?.outcome;
}

/** The handler's own failure, as the model injects it (not the inbox's, e.g. InboxGapError). */
const isHandlerFailure = (outcome: string) => outcome.startsWith('error:Error: the handler failed');

/**
 * parkAfterAttempts: whether an attempt answered `parked` parked the event for its handler's
 * failures or behind such an event (its record holds the aggregate), rather than after a gap wait.
 * Checks that a parked-for-failures event's handler failed `parkAfterAttempts` times first: a
 * retry for a gap (InboxGapError) is no handler failure and must not count.
 */
async function heldPark(
  m: Model,
  e: ModelEvent,
  outcome: string,
  failingNow: boolean,
  before: string | undefined,
): Promise<boolean> {
  if (m.config.parkAfterAttempts === undefined) return false;
  if (isHandlerFailure(outcome)) {
    m.handlerFailures.set(e.eventId, (m.handlerFailures.get(e.eventId) ?? 0) + 1);
    return false;
  }
  if (outcome !== 'parked') return false;
  const [row] = await db.sql<{ holds_chain: boolean | null; reason: string | null; outcome: string }[]>`
    select holds_chain, reason, outcome from inbox_message where consumer = 'model' and event_id = ${e.eventId}`;
  if (row?.holds_chain !== true) return false;
  // Parked by this attempt (not a delivery of an event parked before, nor a replay that stays
  // marked behind a lower held event): its handler must have failed parkAfterAttempts times.
  const parkedNow = row.outcome === 'parked' && before !== 'parked';
  if (parkedNow && row.reason?.startsWith('handler failed')) {
    const failures = (m.handlerFailures.get(e.eventId) ?? 0) + (failingNow ? 1 : 0);
    expect(
      failures,
      `${e.source}/${e.aggregateId}#${e.sequence} parked for its handler's failures after ${failures} of them (parkAfterAttempts ${m.config.parkAfterAttempts})`,
    ).toBeGreaterThanOrEqual(m.config.parkAfterAttempts);
    m.handlerFailures.delete(e.eventId);
  }
  return true;
}

interface Real {
  /** One invocation; `long`: a 5 s invocation (attempts at once: up to 2.25 s of waiting for a lower event), else 2 s. */
  handler: (event: EventBridgeEvent<string, unknown>, long?: boolean) => Promise<string>;
  /** Makes the handler throw after its write, for the next call (a bug, a dependency down). */
  failNext: (fails: boolean) => void;
  /** Events whose handler fails on every attempt until the end of the run (a bug fixed later). */
  poisoned: Set<string>;
}

const receives = (m: Model, type: string) => !m.config.subset || type === 'A';
const delivered = (m: Model, e: ModelEvent) => !e.lost && receives(m, e.type);
const maxAttempts = (m: Model) => m.config.retries + 1;
const orderAware = (m: Model) => m.config.mode === 'process' || m.config.mode === 'park';
/** The producer numbers an aggregate's events across sources: one chain per aggregate (and type). */
const chainKey = (m: Model, e: ModelEvent) => `${e.aggregateId}${m.config.subset ? `/${e.type}` : ''}`;
const gapWait = (m: Model) => WINDOWS[m.config.retries].gapWaitSeconds;
/** How long the event has waited for its gap, as the inbox counts it: 0 after a pause past the maximum event age. */
const waited = (m: Model, e: ModelEvent) => {
  const w = m.waiting.get(e.eventId);
  return w === undefined || m.clock - w.last > MAX_EVENT_AGE ? 0 : m.clock - w.first;
};
const position = (m: Model, e: ModelEvent) => (m.config.subset ? e.typeSequence : e.sequence);

function due(m: Model): Invocation[] {
  return m.invocations.filter((i) => !i.done && i.dueAt <= m.clock);
}

/** One attempt of an invocation, with Lambda's bookkeeping of its outcome. */
async function attempt(
  m: Model,
  r: Real,
  inv: Invocation,
  fails: boolean,
  concurrent = false,
): Promise<string> {
  const e = inv.event;
  const waitedBefore = waited(m, e);
  const before = await outcomeOf(m, e);
  r.failNext(fails);
  const answered = await r.handler(inv.event.delivery, concurrent);
  r.failNext(false);
  // Under a swallowing middleware Lambda sees success; the inbox's own outcome was the error.
  const swallowed = answered.startsWith('swallowed ');
  const outcome = swallowed ? answered.slice('swallowed '.length) : answered;
  // Parked for its handler's failures, or behind such an event: held, not taken by its chain.
  const held = await heldPark(m, e, outcome, fails || r.poisoned.has(e.eventId), before);
  // A parked event delivered again stays parked: neither waited for nor taken anew.
  // So does a held event marked for replay that a delivery reached before the held event below it:
  // its record stays `replaying`, no new park.
  const again =
    outcome === 'parked' &&
    (m.parked.has(e.eventId) ||
      (
        await db.sql<{ outcome: string }[]>`
          select outcome from inbox_message where consumer = 'model' and event_id = ${e.eventId}`
      )[0]?.outcome === 'replaying');
  if (outcome === 'parked' && !again) {
    m.parked.add(e.eventId);
    m.parks++;
  }
  // A taken event never holds its chain back: once the event before it in its chain is taken
  // (applied or parked), an event neither waits for a gap nor is parked.
  // (Of two attempts at once, either may have been decided first: that is left to the order check.)
  if (!concurrent && !held && !again && (outcome === 'parked' || outcome.startsWith('error:InboxGapError'))) {
    const before = m.events.find(
      (p) => chainKey(m, p) === chainKey(m, e) && position(m, p) === position(m, e) - 1,
    );
    expect(
      before === undefined || !m.taken.includes(before.eventId),
      `${e.source}/${e.aggregateId}#${e.sequence}: ${outcome.slice(0, 40)} although the event before it in its chain was taken`,
    ).toBe(true);
  }
  if (orderAware(m)) {
    const label = `${e.source}/${e.aggregateId}#${e.sequence}`;
    if (outcome.startsWith('error:InboxGapError')) {
      // The wait counts from the first attempt however late the retries come (issue 33, item 1).
      expect(
        waitedBefore,
        `${label} failed for its gap although it had waited ${waitedBefore} s`,
      ).toBeLessThan(gapWait(m));
      const w = m.waiting.get(e.eventId);
      if (w === undefined || m.clock - w.last > MAX_EVENT_AGE)
        m.waiting.set(e.eventId, { first: m.clock, last: m.clock });
      else w.last = m.clock;
    } else if (outcome === 'ahead' || (outcome === 'parked' && !held && !again)) {
      // 20 s of slack: the database's clock also moved on by the run's real time.
      expect(
        waitedBefore + 20,
        `${label} ${outcome} after waiting only ${waitedBefore} s`,
      ).toBeGreaterThanOrEqual(gapWait(m));
    }
    if (!outcome.startsWith('error:') && outcome !== 'duplicate') m.waiting.delete(e.eventId);
  }
  inv.attempts++;
  m.log.push(
    `#${inv.id} ${inv.event.source}/${inv.event.aggregateId}#${inv.event.sequence}${inv.event.type} → ${outcome}`,
  );
  settle(m, inv, swallowed ? 'swallowed' : held ? 'held' : again ? 'parked again' : outcome);
  return outcome;
}

/** Lambda's bookkeeping of an attempt's outcome: a retry, the on-failure destination, or done. */
function settle(m: Model, inv: Invocation, outcome: string): void {
  if (outcome === 'swallowed') {
    // Lambda saw success: no retry, nothing in the on-failure destination.
    inv.done = true;
    m.swallowed.push(inv.event);
  } else if (outcome.startsWith('error:')) {
    if (inv.attempts >= maxAttempts(m)) {
      inv.done = true;
      m.failed.push({ event: inv.event, reason: outcome.slice('error:'.length) });
    } else inv.dueAt = m.clock + (RETRY_DELAYS[inv.attempts - 1] as number);
  } else {
    inv.done = true;
    inv.succeeded = true;
    // `replayed`: a delivery of an event the operator marked for replay (its replay's handler
    // failed under a swallowing middleware) applies it (order.ts), and its chain moves on.
    if (['next', 'ahead', 'late', 'parked', 'replayed'].includes(outcome)) m.taken.push(inv.event.eventId);
  }
}

function newInvocation(m: Model, event: ModelEvent): void {
  m.invocations.push({
    id: m.invocations.length,
    event,
    attempts: 0,
    dueAt: m.clock,
    done: false,
    succeeded: false,
  });
}

/** The invariants that hold after every command. */
async function check(m: Model): Promise<void> {
  const rows = await db.sql<
    {
      event_id: string;
      outcome: string | null;
      reason: string | null;
      effects: number;
      arrival: string | null;
    }[]
  >`
    select e.event_id, r.outcome, r.reason,
           (select count(*)::int from effect f where f.event_id = e.event_id) as effects,
           (select f.arrival from effect f where f.event_id = e.event_id limit 1) as arrival
    from unnest(${m.events.map((e) => e.eventId)}::text[]) as e(event_id)
    left join inbox_message r on r.consumer = 'model' and r.event_id = e.event_id`;
  const byId = new Map(rows.map((row) => [row.event_id, row]));
  for (const row of rows) {
    expect(row.effects, `${row.event_id} applied at most once`).toBeLessThanOrEqual(1);
    if (row.effects === 1)
      expect(row.outcome, `${row.event_id} applied: recorded processed`).toBe('processed');
    if (row.outcome && row.outcome !== 'processed') {
      expect(row.effects, `${row.event_id} ${row.outcome}: not applied`).toBe(0);
      expect(row.reason, `${row.event_id} ${row.outcome}: with a reason`).toBeTruthy();
    }
  }
  for (const inv of m.invocations.filter((i) => i.succeeded)) {
    expect(
      byId.get(inv.event.eventId)?.outcome,
      `invocation #${inv.id} succeeded: its event is recorded`,
    ).toBeTruthy();
  }
  for (const f of m.failed) expect(f.reason, 'a failure destination record has a reason').toMatch(/\S/);
  // An invocation whose failure an outer middleware answered for left a trace (issue 33, item 4),
  // unless a later delivery recorded the event.
  if (m.swallowed.length > 0) {
    const traced = new Set(
      (await db.sql<{ event_id: string }[]>`select event_id from inbox_failed where consumer = 'model'`).map(
        (t) => t.event_id,
      ),
    );
    for (const e of m.swallowed) {
      expect(
        traced.has(e.eventId) || Boolean(byId.get(e.eventId)?.outcome),
        `${e.aggregateId}#${e.sequence}: answered for by the outer middleware, with neither a record nor a trace`,
      ).toBe(true);
    }
  }
  // Order: an event applied as `next` came after the event before it in its chain was taken.
  if (m.config.mode !== 'none') {
    for (const e of m.events) {
      if (byId.get(e.eventId)?.arrival !== 'next' || position(m, e) === 1) continue;
      const before = m.events.find(
        (p) => chainKey(m, p) === chainKey(m, e) && position(m, p) === position(m, e) - 1,
      ) as ModelEvent;
      const at = m.taken.indexOf(e.eventId);
      const predecessorAt = m.taken.indexOf(before.eventId);
      expect(
        predecessorAt,
        `${e.eventId} applied next: its predecessor was taken first`,
      ).toBeGreaterThanOrEqual(0);
      expect(predecessorAt).toBeLessThan(at);
    }
  }
}

type Command = fc.AsyncCommand<Model, Real>;

class Produce implements Command {
  readonly source: number;
  readonly aggregate: number;
  readonly type: number;
  readonly lost: boolean;
  constructor(source: number, aggregate: number, type: number, lost = false) {
    this.source = source;
    this.aggregate = aggregate;
    this.type = type;
    this.lost = lost;
  }
  check = () => true;
  async run(m: Model, r: Real) {
    const source = SOURCES[this.source] as string;
    const aggregateId = AGGREGATES[this.aggregate] as string;
    const type = TYPES[this.type] as string;
    // As the producer numbers them: per aggregate, whatever the source (issue 33, item 2).
    const key = aggregateId;
    const counter = m.counters.get(key) ?? { sequence: 0, types: new Map() };
    m.counters.set(key, counter);
    counter.sequence++;
    counter.types.set(type, (counter.types.get(type) ?? 0) + 1);
    const eventId = randomUUID();
    const event: ModelEvent = {
      eventId,
      source,
      aggregateId,
      type,
      sequence: counter.sequence,
      typeSequence: counter.types.get(type) as number,
      lost: this.lost,
      delivery: delivery({
        detailType: type,
        source,
        metadata: {
          eventId,
          aggregateId,
          sequence: counter.sequence,
          typeSequence: counter.types.get(type) as number,
        },
        data: {},
      }) as EventBridgeEvent<string, unknown>,
    };
    m.events.push(event);
    if (delivered(m, event)) newInvocation(m, event);
    await check(m);
    void r;
  }
  toString = () =>
    `produce ${SOURCES[this.source]}/${AGGREGATES[this.aggregate]} ${TYPES[this.type]}${this.lost ? ' (dead-lettered at the relay: never delivered)' : ''}`;
}

class Attempt implements Command {
  readonly pick: number;
  readonly fails: boolean;
  constructor(pick: number, fails: boolean) {
    this.pick = pick;
    this.fails = fails;
  }
  check = (m: Readonly<Model>) => due(m as Model).length > 0;
  async run(m: Model, r: Real) {
    const ready = due(m);
    await attempt(m, r, ready[this.pick % ready.length] as Invocation, this.fails);
    await check(m);
  }
  toString = () => `attempt ${this.pick}${this.fails ? ' (the handler fails)' : ''}`;
}

class AttemptTogether implements Command {
  readonly a: number;
  readonly b: number;
  constructor(a: number, b: number) {
    this.a = a;
    this.b = b;
  }
  check = (m: Readonly<Model>) => due(m as Model).length > 1;
  async run(m: Model, r: Real) {
    const ready = due(m);
    const first = ready[this.a % ready.length] as Invocation;
    const rest = ready.filter((i) => i !== first);
    const second = rest[this.b % rest.length] as Invocation;
    await Promise.all([attempt(m, r, first, false, true), attempt(m, r, second, false, true)]);
    await check(m);
  }
  toString = () => `attempt ${this.a} and ${this.b} at once`;
}

/**
 * Every due attempt at once, each a 5 s invocation: the last attempts of a burst behind a gap,
 * which Lambda makes in any order. Of the events known to be waiting behind a gap, and not yet
 * overtaken, none is taken after a higher event of its chain taken in the same round (issue 33,
 * item 3), for the chains whose every waiting event is in the round and none of whose events fails in it.
 */
class AttemptAll implements Command {
  /** Rotates the order the attempts start in (Lambda keeps none). */
  readonly shift: number;
  constructor(shift: number) {
    this.shift = shift;
  }
  check = (m: Readonly<Model>) => due(m as Model).length > 1;
  async run(m: Model, r: Real) {
    const inOrder = due(m);
    const ready = [
      ...inOrder.slice(this.shift % inOrder.length),
      ...inOrder.slice(0, this.shift % inOrder.length),
    ].reverse();
    const waitingBefore = new Set(
      [...m.waiting.entries()].filter(([, w]) => m.clock - w.last <= MAX_EVENT_AGE).map(([id]) => id),
    );
    const takenBefore = m.taken.length;
    const outcomes = await Promise.all(
      ready.map((inv, i) => sleep(i * 20).then(() => attempt(m, r, inv, false, true))),
    );
    const failedNow = new Set(
      ready.filter((_, i) => outcomes[i]?.startsWith('error:')).map((inv) => inv.event.eventId),
    );
    if (orderAware(m)) {
      const takenNow = m.taken.slice(takenBefore);
      const inRound = new Set(ready.map((i) => i.event.eventId));
      for (const id of takenNow) {
        const y = m.events.find((e) => e.eventId === id) as ModelEvent;
        if (!waitingBefore.has(id)) continue;
        // Taken `next`: its chain stood just below it when it committed, so no higher event of the
        // chain was taken before it, whatever order the attempts' promises settled in (m.taken).
        if (ready.some((inv, i) => inv.event.eventId === id && outcomes[i] === 'next')) continue;
        // Already overtaken before this round (a higher one took the gap's timeout action): late.
        const overtaken = m.taken.slice(0, takenBefore).some((t) => {
          const e = m.events.find((p) => p.eventId === t) as ModelEvent;
          return chainKey(m, e) === chainKey(m, y) && position(m, e) > position(m, y);
        });
        if (overtaken) continue;
        const chainWaiting = m.events.filter(
          (e) => chainKey(m, e) === chainKey(m, y) && waitingBefore.has(e.eventId),
        );
        // One waiting elsewhere, or one of the chain that failed in this round (its handler, or
        // its first attempt found its predecessor not yet applied), holds the lowest back: the
        // events behind it then take the gap's timeout action when their wait in the invocation
        // ends, in any order.
        if (chainWaiting.some((e) => !inRound.has(e.eventId))) continue;
        if (m.events.some((e) => chainKey(m, e) === chainKey(m, y) && failedNow.has(e.eventId))) continue;
        for (const x of takenNow.map((t) => m.events.find((e) => e.eventId === t) as ModelEvent)) {
          if (chainKey(m, x) !== chainKey(m, y) || position(m, x) <= position(m, y)) continue;
          expect(
            takenNow.indexOf(y.eventId),
            `${y.aggregateId}#${y.sequence}, waiting behind its gap, taken after #${x.sequence} of its chain`,
          ).toBeLessThan(takenNow.indexOf(x.eventId));
        }
      }
    }
    await check(m);
  }
  toString = () => `every due attempt at once (rotated by ${this.shift}, reversed)`;
}

/** A burst behind a gap: one event of an aggregate dead-lettered at the relay, then three more. */
class Burst implements Command {
  readonly source: number;
  readonly aggregate: number;
  constructor(source: number, aggregate: number) {
    this.source = source;
    this.aggregate = aggregate;
  }
  check = () => true;
  async run(m: Model, r: Real) {
    await new Produce(this.source, this.aggregate, 0, true).run(m, r);
    for (const source of [this.source, 1 - this.source, this.source])
      await new Produce(source, this.aggregate, 0).run(m, r);
  }
  toString = () => `a burst on ${AGGREGATES[this.aggregate]} behind a dead-lettered event`;
}

/** An attempt that never reaches the inbox (the database unreachable in a failover): it fails. */
class LoseAttempt implements Command {
  readonly pick: number;
  constructor(pick: number) {
    this.pick = pick;
  }
  check = (m: Readonly<Model>) => due(m as Model).length > 0;
  async run(m: Model) {
    const ready = due(m);
    const inv = ready[this.pick % ready.length] as Invocation;
    inv.attempts++;
    m.log.push(`#${inv.id} ${inv.event.aggregateId}#${inv.event.sequence} → lost (never reached the inbox)`);
    settle(m, inv, 'error:Error: connect ECONNREFUSED (injected)');
    await check(m);
  }
  toString = () => `attempt ${this.pick} never reaches the inbox`;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

class Duplicate implements Command {
  readonly pick: number;
  constructor(pick: number) {
    this.pick = pick;
  }
  check = (m: Readonly<Model>) => m.events.some((e) => delivered(m as Model, e));
  async run(m: Model) {
    const received = m.events.filter((e) => delivered(m, e));
    newInvocation(m, received[this.pick % received.length] as ModelEvent);
    await check(m);
  }
  toString = () => `deliver again ${this.pick}`;
}

class Advance implements Command {
  readonly seconds: number;
  constructor(seconds: number) {
    this.seconds = seconds;
  }
  check = () => true;
  async run(m: Model) {
    m.clock += this.seconds;
    await db.sql`update inbox_gap set first_seen_at = first_seen_at - make_interval(secs => ${this.seconds}),
                                      last_seen_at = last_seen_at - make_interval(secs => ${this.seconds})`;
    await check(m);
  }
  toString = () => `advance ${this.seconds} s`;
}

class ReplayFailed implements Command {
  readonly pick: number;
  constructor(pick: number) {
    this.pick = pick;
  }
  check = (m: Readonly<Model>) => m.failed.length > 0;
  async run(m: Model) {
    const [record] = m.failed.splice(this.pick % m.failed.length, 1);
    newInvocation(m, (record as { event: ModelEvent }).event);
    await check(m);
  }
  toString = () => `replay failure record ${this.pick}`;
}

class Poison implements Command {
  readonly pick: number;
  constructor(pick: number) {
    this.pick = pick;
  }
  check = (m: Readonly<Model>) => m.events.length > 0;
  async run(m: Model, r: Real) {
    r.poisoned.add((m.events[this.pick % m.events.length] as ModelEvent).eventId);
    await check(m);
  }
  toString = () => `the handler fails on event ${this.pick} until the end`;
}

class ReplayParked implements Command {
  check = () => true;
  async run(m: Model, r: Real) {
    await replayParked(m, r);
    await check(m);
  }
  toString = () => 'replay the parked events';
}

async function replayParked(m: Model, r: Real): Promise<void> {
  // What `outbox inbox parked replay --function-name` does: mark, then invoke with each event.
  const parked = await markParkedForReplay(db.sql, { consumer: 'model' });
  for (const p of parked) {
    m.parked.delete(p.eventId);
    const answered = await r.handler(p.event);
    // Under a swallowing middleware the replay's invoke succeeds; the inbox's outcome was the error
    // (as in `attempt`): a handler failure that counts towards parkAfterAttempts all the same.
    const outcome = answered.startsWith('swallowed ') ? answered.slice('swallowed '.length) : answered;
    m.log.push(`replay of parked ${p.eventId} → ${answered}`);
    // Failed again and parked again (parkAfterAttempts): a new park, counted again. One left
    // marked for replay behind a lower event that parked again is answered `parked` too, but its
    // record stays `replaying`: no new park.
    if (outcome === 'parked') {
      const [row] = await db.sql<{ outcome: string }[]>`
        select outcome from inbox_message where consumer = 'model' and event_id = ${p.eventId}`;
      if (row?.outcome === 'parked') {
        m.parked.add(p.eventId);
        m.parks++;
      }
    }
    const e = m.events.find((x) => x.eventId === p.eventId);
    if (e) await heldPark(m, e, outcome, r.poisoned.has(e.eventId), 'replaying');
    // Taken by its chain now (a held event's chain stood below it until this replay).
    if (outcome === 'replayed') m.taken.push(p.eventId);
  }
}

/**
 * Runs every retry still due, with the failing handlers still failing (their events end in the
 * failure destination, and the events behind them wait out their gaps); then the bug is fixed and
 * the operator replays the failure destination (in the order the run chose) and the parked events,
 * until nothing is left.
 */
async function heal(m: Model, r: Real, newestFirst: boolean): Promise<void> {
  const drain = async () => {
    for (let round = 0; round < 20 && m.invocations.some((i) => !i.done); round++) {
      for (const inv of due(m)) await attempt(m, r, inv, false);
      if (!m.invocations.some((i) => !i.done)) break;
      m.clock += 60;
      await db.sql`update inbox_gap set first_seen_at = first_seen_at - interval '60 seconds',
                                        last_seen_at = last_seen_at - interval '60 seconds'`;
    }
    if (m.invocations.some((i) => !i.done)) throw new Error('invocations still pending after 20 rounds');
  };
  await drain();
  r.poisoned.clear(); // the bug is fixed
  for (let round = 0; round < 10; round++) {
    // The operator replays the on-failure destination and, for the swallowed ones, the inbox's
    // failure traces (`outbox inbox failed list --json`).
    const traced = new Set(
      (await db.sql<{ event_id: string }[]>`select event_id from inbox_failed where consumer = 'model'`).map(
        (t) => t.event_id,
      ),
    );
    const swallowed = m.swallowed.splice(0).filter((e) => traced.has(e.eventId));
    const failures = [...m.failed.splice(0), ...swallowed.map((event) => ({ event, reason: 'traced' }))].sort(
      (a, b) => (newestFirst ? -1 : 1) * (a.event.sequence - b.event.sequence),
    );
    for (const f of failures) newInvocation(m, f.event);
    await drain();
    const [parked] = await db.sql<{ n: number }[]>`
      select count(*)::int as n from inbox_message where consumer = 'model' and outcome in ('parked', 'replaying')`;
    if ((parked?.n ?? 0) > 0) await replayParked(m, r);
    if (failures.length === 0 && (parked?.n ?? 0) === 0) return;
    // The operator's next look is minutes later: a swallowed event waiting for its gap (Lambda
    // never retried it) finds its wait over by then.
    m.clock += 200;
    await db.sql`update inbox_gap set first_seen_at = first_seen_at - interval '200 seconds',
                                      last_seen_at = last_seen_at - interval '200 seconds'`;
  }
  throw new Error('the system did not settle in 10 rounds of replays');
}

async function finalCheck(m: Model): Promise<void> {
  await check(m);
  const deliveredEvents = m.events.filter((e) => delivered(m, e));
  const rows = await db.sql<{ event_id: string; outcome: string | null; effects: number }[]>`
    select e.event_id, r.outcome, (select count(*)::int from effect f where f.event_id = e.event_id) as effects
    from unnest(${deliveredEvents.map((e) => e.eventId)}::text[]) as e(event_id)
    left join inbox_message r on r.consumer = 'model' and r.event_id = e.event_id`;
  const byId = new Map(rows.map((row) => [row.event_id, row]));
  let stale = 0;
  for (const e of deliveredEvents) {
    const row = byId.get(e.eventId);
    if (row?.outcome === 'stale') {
      stale++;
      expect(m.config.mode, `${e.eventId} stale: only under ignore-stale`).toBe('ignore-stale');
      const superseding = deliveredEvents.filter(
        (later) =>
          chainKey(m, later) === chainKey(m, e) &&
          position(m, later) > position(m, e) &&
          byId.get(later.eventId)?.effects === 1,
      );
      expect(
        superseding.length,
        `${e.eventId} stale: a later event of its chain was applied`,
      ).toBeGreaterThan(0);
      continue;
    }
    expect(
      row?.effects,
      `${e.eventId} (${e.source}/${e.aggregateId}#${e.sequence}${e.type}) applied exactly once`,
    ).toBe(1);
  }
  expect(m.metrics.get('InboxStale') ?? 0, 'every stale event counted').toBe(stale);
  expect(m.metrics.get('InboxParked') ?? 0, 'every park counted once').toBe(m.parks);
  expect(m.failed).toEqual([]);
}

const produce = fc.tuple(fc.nat(1), fc.nat(1), fc.nat(1)).map(([s, a, t]) => new Produce(s, a, t));
const produceLost = fc.tuple(fc.nat(1), fc.nat(1), fc.nat(1)).map(([s, a, t]) => new Produce(s, a, t, true));
const attemptOne = fc.tuple(fc.nat(5), fc.boolean()).map(([p, f]) => new Attempt(p, f));
const advance = fc.constantFrom(30, 60, 120, 200, 3 * 86_400).map((s) => new Advance(s));
/** Any command, attempts and the clock weighted up; a few events are produced before them. */
const commands = fc.commands(
  [
    produce,
    produce,
    produceLost,
    attemptOne,
    attemptOne,
    attemptOne,
    advance,
    advance,
    fc.nat(5).map((n) => new AttemptAll(n)),
    fc.nat(5).map((n) => new AttemptAll(n)),
    fc.tuple(fc.nat(1), fc.nat(1)).map(([s, a]) => new Burst(s, a)),
    fc.nat(5).map((p) => new LoseAttempt(p)),
    fc.tuple(fc.nat(5), fc.nat(5)).map(([a, b]) => new AttemptTogether(a, b)),
    fc.nat(7).map((p) => new Duplicate(p)),
    fc.nat(7).map((p) => new Poison(p)),
    fc.nat(3).map((p) => new ReplayFailed(p)),
    fc.constant(new ReplayParked()),
  ],
  { maxCommands: 40, size: 'large' },
);
const initialEvents = fc.array(produce, { minLength: 2, maxLength: 6 });

// Swallowing with parkAfterAttempts: seed -1282648755's finding (an event parked after 1 handler
// failure, parkAfterAttempts 2) was the model's own: it did not count a parked event's replay that
// failed under the swallowing middleware (replayParked), which the inbox rightly counts.
const configs = fc.record({
  mode: fc.constantFrom<Mode>('none', 'ignore-stale', 'process', 'park'),
  subset: fc.boolean(),
  /** The operator replays the failure destination newest first (the wrong order) or oldest first. */
  newestFirst: fc.boolean(),
  retries: fc.constantFrom<1 | 2>(2, 1),
  swallowing: fc.boolean(),
  parkAfterAttempts: fc.constantFrom<number | undefined>(undefined, undefined, 1, 2, 3),
});

describe('inbox model', () => {
  it("each event delivered is applied exactly once, or recorded with its reason, through duplicates, reordering, Lambda's retries and replays", {
    timeout: Math.max(60_000, RUNS * 3_000),
  }, async () => {
    let failing = false;
    await fc.assert(
      fc.asyncProperty(configs, initialEvents, commands, async (config, initial, cmds) => {
        await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, effect`;
        const model: Model = {
          config,
          clock: 0,
          events: [],
          counters: new Map(),
          invocations: [],
          failed: [],
          taken: [],
          log: [],
          metrics: new Map(),
          swallowed: [],
          waiting: new Map(),
          handlerFailures: new Map(),
          parked: new Set(),
          parks: 0,
        };
        const options: InboxOptions<Record<string, unknown>> = {
          sql: db.sql,
          consumer: 'model',
          ...(config.mode === 'none' || config.mode === 'ignore-stale'
            ? { order: config.mode }
            : { order: 'wait-for-gap', onGapTimeout: config.mode, ...WINDOWS[config.retries] }),
          ...(config.subset ? { types: ['A'] } : {}),
          parkAfterAttempts: config.parkAfterAttempts,
          metrics: {
            write: (line) => {
              // The inbox's counts only (ConsumerLag is one value per applied event).
              const name = Object.keys(JSON.parse(line)).find((k) => k.startsWith('Inbox'));
              if (name) model.metrics.set(name, (model.metrics.get(name) ?? 0) + 1);
            },
          },
        };
        const inner = inbox(options, async (_event, { inbox: i }) => {
          await i.tx`insert into effect (event_id, arrival) values (${i.metadata.eventId}, ${i.arrival})`;
          if (failing || real.poisoned.has(i.metadata.eventId))
            throw new Error('the handler failed (injected)');
          return i.arrival;
        });
        const wrapped = config.swallowing
          ? (middy<EventBridgeEvent<string, unknown>, unknown>()
              .use({
                onError: async (request) => ({
                  swallowed: `error:${(request.error as Error).name}: ${(request.error as Error).message}`,
                }),
              })
              .handler(inner) as unknown as typeof inner)
          : inner;
        const real: Real = {
          handler: (event, long) =>
            wrapped({ ...event, id: randomUUID() }, lambdaContext(long ? 5_000 : 2_000)).then(
              // the handler returns the arrival; a skip is the inbox's answer
              (r) =>
                typeof r === 'string'
                  ? r
                  : 'swallowed' in (r as object)
                    ? `swallowed ${(r as unknown as { swallowed: string }).swallowed}`
                    : (r as { inbox: string }).inbox,
              (e: Error) => `error:${e.name}: ${e.message}`,
            ),
          failNext: (fails) => {
            failing = fails;
          },
          poisoned: new Set(),
        };
        try {
          for (const p of initial) await p.run(model, real);
          await fc.asyncModelRun(() => ({ model, real }), cmds);
          await heal(model, real, config.newestFirst);
          await finalCheck(model);
          if (process.env.INBOX_MODEL_STATS) {
            const tally = new Map<string, number>();
            for (const l of model.log) {
              const k = l.split('→ ')[1]?.split(':')[0] ?? '?';
              tally.set(k, (tally.get(k) ?? 0) + 1);
            }
            process.stderr.write(
              `${JSON.stringify(config)} ${model.events.length} events ${JSON.stringify(Object.fromEntries(tally))}\n`,
            );
          }
        } catch (error) {
          (error as Error).message +=
            `\nconfig ${JSON.stringify(config)}; first: ${initial.map(String).join(', ')}; attempts:\n  ${model.log.join('\n  ')}`;
          throw error;
        }
      }),
      { numRuns: RUNS, ...(SEED === undefined ? {} : { seed: SEED }), endOnFailure: false },
    );
  });
});
