/**
 * The inbox's bookkeeping, inside the invocation's transaction: record the event for this consumer,
 * and decide, from the order state of its chain, whether the handler runs.
 *
 * A chain is what an order-aware consumer keeps in order: the events of one aggregate
 * (`sequence` 1, 2, 3…, numbered by the producer's outbox across the sources it emits), or, for a
 * consumer that declared the `types` it receives, the events of one type of that aggregate
 * (`typeSequence`). Its state is the position of the last
 * event it took in order (`inbox_aggregate.last_sequence`), read under a row lock: two events of
 * one chain are decided one after the other, and the second sees the first's outcome.
 *
 * Nothing is dropped without a trace: an event is applied (`next`, `ahead`, `late`, `replayed`),
 * or acknowledged as a `duplicate` of a record that exists, as `stale` (ignore-stale: provably
 * superseded by a later event of its chain, recorded and counted) or `parked` (recorded whole for
 * an operator, counted), or it fails the invocation with a typed error.
 */
import type { EventBridgeEvent } from 'aws-lambda';
import type { Sql, Tx } from '../platform/db.ts';
import type { Delivery } from './delivery.ts';
import { InboxGapError } from './errors.ts';
import {
  adoptChain,
  advanceChain,
  type ChainKey,
  clearGap as clearGapRow,
  type DbGapWait,
  type GapPlace,
  lockChain as lockChainRound,
  lockMessage,
  markHeld,
  markParked,
  markReplayed,
  markStale,
  ownChainKey,
  readChainPosition,
  readGap,
  readHandlerFailures,
  readHolder,
  readHoldsChain,
  recordMessage,
  rememberGap as rememberGapRow,
} from './sql/index.ts';

/** How an order-aware consumer treats an event that is not the next one of its chain. */
export type InboxOrder = 'none' | 'ignore-stale' | 'wait-for-gap';

/**
 * Where an applied event stood in its chain, as the handler sees it (`inbox.arrival`):
 * - `unordered`: order `none`, or an event without the position its chain needs (a `types`
 *   consumer receiving an event enqueued before migration 010, which has no `typeSequence`);
 * - `next`: every earlier event of its chain had been taken (the first one: it is #1);
 * - `ahead`: earlier events of its chain were still missing (ignore-stale; wait-for-gap after
 *   `gapWaitSeconds` with `onGapTimeout: 'process'`);
 * - `late`: wait-for-gap, a later event of its chain was taken before it (it waited out its own
 *   gap, or it is a replay);
 * - `replayed`: a parked event an operator re-applied (`outbox inbox parked replay`).
 */
export type InboxArrival = 'unordered' | 'next' | 'ahead' | 'late' | 'replayed';

/** Why the handler did not run: the invocation's response then. */
export interface InboxSkip {
  /**
   * - `duplicate`: this consumer has a record under the event's key (the same event, or with a
   *   business `key` the same fact from another route);
   * - `stale`: ignore-stale, superseded by a later event of its chain; or, in any mode, an event
   *   with no record that is a replay below its chain's position, or older than the inbox's
   *   retention (its record may have been pruned: it may have been applied), reason
   *   `beyond-retention: …` or `replay-behind-chain: …` (recorded, counted);
   * - `parked`: wait-for-gap with `onGapTimeout: 'park'`, set aside after its wait (recorded
   *   whole, counted, alarmed on; `outbox inbox parked replay` re-applies it); a redelivery or a
   *   bus replay of a parked event is answered `parked` too, and it stays parked;
   * - `heartbeat`: the monitor's heartbeat event (`outbox.heartbeat` / `OutboxHeartbeat`),
   *   counted (`HeartbeatReceived`, `HeartbeatAgeSeconds`) and not recorded
   *   (docs/observe.md#the-heartbeat).
   */
  inbox: 'duplicate' | 'stale' | 'parked' | 'heartbeat';
  eventId: string;
  /** Present when a Custom Event Bus subscriber delivered it as a replay (`aws:DeliveryType` REPLAY). */
  replay?: true;
}

/** The settings the decision reads. */
export interface OrderSettings {
  consumer: string;
  order: InboxOrder;
  types: readonly string[] | undefined;
  gapWaitSeconds: number;
  retryWindowSeconds: number;
  /**
   * No retry comes later than this after the previous attempt, seconds (the function's maximum
   * event age): a delivery after a longer pause is a replay, and waits anew.
   */
  maxEventAgeSeconds: number;
  onGapTimeout: 'process' | 'park';
  /**
   * Park an event after this many failed handler calls, and hold its aggregate: its later events
   * park behind it (see inbox.ts). Undefined: off.
   */
  parkAfterAttempts: number | undefined;
  /**
   * How long the inbox keeps its records, seconds (`retentionDays`): an event older than this may
   * have been applied and its record pruned since.
   */
  retentionSeconds: number;
}

/**
 * What the invocation does with the event. `again`: the event was parked by an earlier delivery
 * (not counted as parked a second time).
 */
export type Decision = { apply: InboxArrival } | { skip: InboxSkip['inbox']; again?: true };

/**
 * Records the event and decides. Runs inside the invocation's transaction.
 * @param mayWait whether the invocation still has time to wait for a lower event of the chain
 *   ({@link WaitingForLowerEvent}); when not, an event whose wait is over takes the gap's timeout
 *   action although a lower one is waiting
 * @throws {InboxGapError} wait-for-gap, when the event must wait for a missing one: the caller
 *   rolls back and remembers where it waits and since when ({@link rememberGap})
 * @throws {WaitingForLowerEvent} wait-for-gap, when its wait is over but a lower event of its
 *   chain is waiting behind the same gap: the caller rolls back, waits ({@link waitForChain}) and
 *   decides again
 * @param replay a Custom Event Bus replay (`aws:DeliveryType` REPLAY)
 */
export async function decide<T>(
  tx: Tx,
  s: OrderSettings,
  d: Delivery<T>,
  key: string,
  event: EventBridgeEvent<string, unknown>,
  mayWait: boolean,
  replay = false,
): Promise<Decision> {
  const { consumer } = s;
  const { eventId, aggregateType, aggregateId } = d.metadata;

  // parkAfterAttempts: the handler's failures so far, read before recordMessage deletes the trace.
  const failures = s.parkAfterAttempts === undefined ? 0 : await readHandlerFailures(tx, consumer, eventId);

  // 1. The record. A concurrent delivery of the same event waits here on the first one's
  // uncommitted row, then sees it: only one of them goes on.
  const inserted = await recordMessage(tx, {
    consumer,
    key,
    eventId,
    source: d.source,
    type: d.type,
    aggregateType,
    aggregateId,
    sequence: d.sequence,
    outboxId: d.outboxId,
  });
  let otherRoute = false;
  if (!inserted) {
    const existing = await lockMessage(tx, consumer, key);
    const same = !existing || existing.event_id === null || existing.event_id === eventId;
    if (same && existing?.outcome === 'replaying') {
      const held = s.parkAfterAttempts !== undefined && (await readHoldsChain(tx, consumer, key));
      // A held event is applied only after every held event of its aggregate below it: a replay
      // (or a redelivery) out of order leaves it marked for replay.
      if (held && (await readHolder(tx, consumer, aggregateType, aggregateId, d.sequence, d.outboxId))) {
        return { skip: 'parked', again: true };
      }
      // An operator asked for this parked event to be applied: this delivery does it.
      await markReplayed(tx, consumer, key);
      if (held) await releaseChain(tx, s, d);
      return { apply: 'replayed' };
    }
    // A parked event was never applied: a redelivery or a bus replay of it leaves it parked for
    // the operator (`outbox inbox parked replay` applies it), and says so (issue 45, item 4).
    if (same && existing?.outcome === 'parked') return { skip: 'parked', again: true };
    if (same || s.order === 'none') return { skip: 'duplicate' };
    // The same business key from another event (the same fact by another route): its effect is
    // applied, but it still takes its place in its own chain, or that chain's next event would
    // wait for it forever.
    otherRoute = true;
  }
  if (s.parkAfterAttempts !== undefined && !otherRoute) {
    // An earlier event of the aggregate was parked after its handler kept failing: this one parks
    // behind it, in order, until an operator replays them (the chain is held, not skipped).
    const holder = await readHolder(tx, consumer, aggregateType, aggregateId, d.sequence, d.outboxId);
    if (holder) {
      await markHeld(
        tx,
        consumer,
        key,
        event,
        `held behind event ${holder.event_id} (#${holder.sequence} of ${aggregateType}/${aggregateId}), parked after its handler failed; replay them in order`,
      );
      return { skip: 'parked' };
    }
    // Its handler failed that many times already, and the failing attempts could not park it
    // themselves (they ran out of time): parked now, without running the handler again.
    if (failures >= s.parkAfterAttempts) {
      await markHeld(tx, consumer, key, event, handlerFailureReason(failures, s.parkAfterAttempts));
      return { skip: 'parked' };
    }
  }
  // Replays across time (issue 45): an event older than the retention has no record to tell
  // whether it was applied (pruned), so it is not applied again: `stale`, with the reason.
  const age = (Date.now() - Date.parse(d.metadata.occurredAt)) / 1000;
  const tooOld = age > s.retentionSeconds;
  const beyondRetention = async (where: string) => {
    await markStale(
      tx,
      consumer,
      key,
      `beyond-retention: ${where}, and it is ${(age / 86_400).toFixed(1)} days old, older than the inbox's retention (retentionDays ${s.retentionSeconds / 86_400}): its record may have been pruned, so it is not applied again`,
    );
    return { skip: 'stale' } as const;
  };
  if (s.order === 'none') {
    if (tooOld && !otherRoute) return beyondRetention('no record of it');
    return { apply: 'unordered' };
  }

  const chain = s.types ? d.type : '';
  const position = s.types ? d.typeSequence : d.sequence;
  if (position === undefined) {
    if (otherRoute) return { skip: 'duplicate' };
    return tooOld ? beyondRetention('no record of it') : { apply: 'unordered' };
  }

  // 2. The chain's state, locked until this transaction ends: the chain of the event's outbox.
  const { key: chainKey, last } = await lockChain(tx, chainOf(s.consumer, d, chain), d);
  const clearGap = async () => {
    if (s.order === 'wait-for-gap') await clearGapRow(tx, consumer, eventId);
  };

  if (position <= last) {
    if (otherRoute) return { skip: 'duplicate' };
    // No record, below its chain's position: applied and pruned, or missed. Only a live retry or a
    // replay from the on-failure destination within the retention is taken `late`.
    if (tooOld || replay) {
      await clearGap();
      if (tooOld) return beyondRetention(`no record of it below #${last} of ${describeChain(d, chain)}`);
      await markStale(
        tx,
        consumer,
        key,
        `replay-behind-chain: a bus replay of #${position} with no record of it below #${last} of ${describeChain(d, chain)}: not applied out of order`,
      );
      return { skip: 'stale' };
    }
    if (s.order === 'ignore-stale') {
      await markStale(
        tx,
        consumer,
        key,
        `superseded by #${last} of its chain (${describeChain(d, chain)}), applied before it`,
      );
      return { skip: 'stale' };
    }
    await clearGap();
    return { apply: 'late' };
  }

  const advance = () => advanceChain(tx, chainKey, position, d.source);
  if (position === last + 1n || s.order === 'ignore-stale') {
    await advance();
    await clearGap();
    if (otherRoute) return { skip: 'duplicate' };
    return { apply: position === last + 1n ? 'next' : 'ahead' };
  }

  // 3. wait-for-gap, and #last+1 is missing.
  const place = { chain: chainKey, eventId, position, forgetAfterSeconds: s.maxEventAgeSeconds };
  const gap = await readGap(tx, place, last);
  const waited = gapWaited(s, gap);
  if (waited < s.gapWaitSeconds) {
    const error = new InboxGapError(
      `event ${eventId} is #${position} of ${describeChain(d, chain)} but #${last + 1n} was not applied yet (waited ${waited.toFixed(0)} of ${s.gapWaitSeconds} s); failing so that Lambda retries it`,
      waited,
    );
    gapPlaces.set(error, place);
    throw error;
  }
  // Its wait is over, but an event below it is waiting behind the same gap: the lowest one decides
  // the gap, and this one follows it in order (a burst behind one missing event, whose last
  // attempts come in any order). It waits for that one in this invocation, for a bounded time.
  if (gap.lower !== null && mayWait) throw new WaitingForLowerEvent(chainKey, BigInt(gap.lower), position);
  // The wait is over: the chain moves on past the gap (the missing events, if they come, are
  // applied late), so that neither this event nor a parked one holds the aggregate back.
  await advance();
  await clearGap();
  if (otherRoute) return { skip: 'duplicate' };
  // One missing event is named once (#2), several as a range (#2…#4).
  const gapEvents = position - 1n === last + 1n ? `#${last + 1n}` : `#${last + 1n}…#${position - 1n}`;
  const missing =
    gap.lower === null
      ? `${gapEvents} of ${describeChain(d, chain)} still missing after ${waited.toFixed(0)} s`
      : `${gapEvents} of ${describeChain(d, chain)} not applied after ${waited.toFixed(0)} s (#${gap.lower} was seen waiting, but did not come again in time)`;
  if (s.onGapTimeout === 'park') {
    await markParked(tx, consumer, key, event, missing);
    return { skip: 'parked' };
  }
  return { apply: 'ahead' };
}

/** The reason of an event parked for its handler's failures (`outbox inbox parked list`). */
export function handlerFailureReason(failures: number, parkAfterAttempts: number, last?: string): string {
  const text = `handler failed ${failures} time(s) (parkAfterAttempts ${parkAfterAttempts}); its aggregate's later events park behind it: replay them in order${last ? `; last error: ${last}` : ''}`;
  return text.slice(0, 2000);
}

/**
 * A held event was replayed: its chain's position moves up to it (it was held, not skipped, so the
 * chain stood below it), so that the aggregate's next new event is `next`, not behind a gap.
 */
async function releaseChain<T>(tx: Tx, s: OrderSettings, d: Delivery<T>): Promise<void> {
  if (s.order === 'none') return;
  const chain = s.types ? d.type : '';
  const position = s.types ? d.typeSequence : d.sequence;
  if (position === undefined) return;
  const { key, last } = await lockChain(tx, chainOf(s.consumer, d, chain), d);
  if (position > last) await advanceChain(tx, key, position, d.source);
}

/**
 * Thrown by {@link decide} when an event whose gap wait is over has another event of its chain
 * waiting below it: the invocation rolls back, waits until the chain's position reaches `lower`
 * ({@link waitForChain}), and decides again. Never leaves the inbox.
 */
export class WaitingForLowerEvent extends Error {
  override name = 'WaitingForLowerEvent';
  readonly chain: ChainKey;
  /** The lowest position waiting below this event. */
  readonly lower: bigint;
  constructor(chain: ChainKey, lower: bigint, position: bigint) {
    super(`#${position} waits for #${lower} of its chain, which is waiting behind the same gap`);
    this.chain = chain;
    this.lower = lower;
  }
}

/** How often an event waiting in its invocation for a lower one polls its chain's position, ms. */
const POLL_MS = 150;

/**
 * Waits until the chain's position reaches `lower` (that event was applied, parked or taken late
 * before it), or until `until` (epoch ms), polling outside any transaction; each poll is bounded
 * by `bounded` (the invocation's deadline).
 * @returns true when the chain moved far enough, false when the time ran out
 */
export async function waitForChain(
  sql: Sql,
  waiting: WaitingForLowerEvent,
  until: number,
  bounded: <T>(p: Promise<T>) => Promise<T>,
): Promise<boolean> {
  while (Date.now() + POLL_MS < until) {
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
    const position = await bounded(readChainPosition(sql, waiting.chain));
    if (position !== undefined && position >= waiting.lower) return true;
  }
  return false;
}

function describeChain(d: Delivery<unknown>, chain: string): string {
  const aggregate = `${d.metadata.aggregateType}/${d.metadata.aggregateId}`;
  return chain === '' ? aggregate : `${chain} of ${aggregate}`;
}

/**
 * The key of the aggregate's chain row: the aggregate across sources (one outbox numbers it), or
 * one type of it. Which row holds the event's chain is decided under its lock ({@link lockChain}).
 */
function chainOf(consumer: string, d: Delivery<unknown>, chain: string): ChainKey {
  return {
    consumer,
    aggregateType: d.metadata.aggregateType,
    aggregateId: d.metadata.aggregateId,
    chain,
  };
}

/**
 * Locks the state row of the event's chain and returns its key and position, creating the row when
 * the chain is new at the position its per-source rows of migrations 010 to 017 recorded, or at 0
 * (nothing taken yet). The event's chain is the aggregate's row when the event names no outbox (a
 * relay before migration 031), when the row names none yet (its first named outbox adopts it, in
 * place, unless another outbox owns a sibling row of the aggregate: the chain kept before continues) or when it names the event's; another outbox's events
 * have a row of their own (docs/inbox-order.md#two-outboxes-one-consumer). One statement finds and
 * locks the one row an event's chain is in (sql/lock-chain.ts), whichever outbox it comes from.
 */
async function lockChain(
  tx: Tx,
  aggregate: ChainKey,
  d: Delivery<unknown>,
): Promise<{ key: ChainKey; last: bigint }> {
  const outboxId = d.outboxId;
  const own = outboxId === undefined ? undefined : ownChainKey(aggregate, outboxId);
  // Rounds: an insert meets a row another transaction created meanwhile only once per row.
  for (let round = 0; round < 3; round++) {
    const locked = await lockChainRound(tx, aggregate, outboxId, own);
    if (locked === undefined) continue;
    if (locked.own) return { key: own as ChainKey, last: locked.last };
    if (
      outboxId === undefined ||
      locked.outboxId === outboxId ||
      (locked.outboxId === null && (await adoptChain(tx, aggregate, outboxId)))
    ) {
      return { key: aggregate, last: locked.last };
    }
    // Another outbox's chain: this outbox's first event of the aggregate starts a row of its own.
    const mine = await lockChainRound(tx, own as ChainKey, outboxId);
    if (mine !== undefined) return { key: own as ChainKey, last: mine.last };
  }
  throw new Error(`inbox: the order state of ${describeChain(d, aggregate.chain)} could not be locked`);
}

/**
 * How long this event has waited for its gap, seconds, on the database clock: 0 on its first
 * delivery, and again when its last attempt is older than the maximum event age (no retry of
 * Lambda comes that late: it is a replay, which waits anew instead of finding its old wait long
 * over and skipping the gap at once). A late or missed retry keeps the wait counted from the
 * first attempt.
 */
function gapWaited(s: OrderSettings, gap: DbGapWait): number {
  if (gap.waited === null || gap.idle === null || gap.idle > s.maxEventAgeSeconds) return 0;
  return Math.max(0, gap.waited);
}

/** Where the event of each {@link InboxGapError} thrown by {@link decide} waits. */
const gapPlaces = new WeakMap<InboxGapError, GapPlace>();

/**
 * After an {@link InboxGapError} rolled the invocation back: remembers, outside any transaction,
 * where the event waits, when it was first seen waiting (kept across Lambda's retries) and last seen.
 */
export function rememberGap(sql: Sql, error: InboxGapError) {
  const place = gapPlaces.get(error);
  if (!place) throw new Error('inbox: rememberGap needs an InboxGapError thrown by decide');
  return rememberGapRow(sql, place);
}
