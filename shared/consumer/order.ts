/**
 * The inbox's bookkeeping, inside the invocation's transaction: record the event for this consumer,
 * and decide, from the order state of its chain, whether the handler runs.
 *
 * A chain is what an order-aware consumer keeps in order: the events of one aggregate from one
 * source (`sequence` 1, 2, 3…), or, for a consumer that declared the `types` it receives, the
 * events of one type of that aggregate (`typeSequence`). Its state is the position of the last
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
  advanceChain,
  type ChainKey,
  clearGap as clearGapRow,
  lockChain as lockChainRound,
  lockMessage,
  markParked,
  markReplayed,
  markStale,
  readGap,
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
   * - `stale`: ignore-stale, superseded by a later event of its chain (recorded, counted);
   * - `parked`: wait-for-gap with `onGapTimeout: 'park'`, set aside after its wait (recorded
   *   whole, counted, alarmed on; `outbox inbox parked replay` re-applies it).
   */
  inbox: 'duplicate' | 'stale' | 'parked';
  eventId: string;
}

/** The settings the decision reads. */
export interface OrderSettings {
  consumer: string;
  order: InboxOrder;
  types: readonly string[] | undefined;
  gapWaitSeconds: number;
  retryWindowSeconds: number;
  onGapTimeout: 'process' | 'park';
}

/** What the invocation does with the event. */
export type Decision = { apply: InboxArrival } | { skip: InboxSkip['inbox'] };

/**
 * Records the event and decides. Runs inside the invocation's transaction.
 * @throws {InboxGapError} wait-for-gap, when the event must wait for a missing one: the caller
 *   rolls back and remembers when it was first seen ({@link rememberGap})
 */
export async function decide<T>(
  tx: Tx,
  s: OrderSettings,
  d: Delivery<T>,
  key: string,
  event: EventBridgeEvent<string, unknown>,
): Promise<Decision> {
  const { consumer } = s;
  const { eventId, aggregateType, aggregateId } = d.metadata;

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
  });
  let otherRoute = false;
  if (!inserted) {
    const existing = await lockMessage(tx, consumer, key);
    const same = !existing || existing.event_id === null || existing.event_id === eventId;
    if (same && existing?.outcome === 'replaying') {
      // An operator asked for this parked event to be applied: this delivery does it.
      await markReplayed(tx, consumer, key);
      return { apply: 'replayed' };
    }
    if (same || s.order === 'none') return { skip: 'duplicate' };
    // The same business key from another event (the same fact by another route): its effect is
    // applied, but it still takes its place in its own chain, or that chain's next event would
    // wait for it forever.
    otherRoute = true;
  }
  if (s.order === 'none') return { apply: 'unordered' };

  const chain = s.types ? d.type : '';
  const position = s.types ? d.typeSequence : d.sequence;
  if (position === undefined) return otherRoute ? { skip: 'duplicate' } : { apply: 'unordered' };

  // 2. The chain's state, locked until this transaction ends.
  // A wait-for-gap chain adopts the position recorded before migration 010 (without a source), so
  // that an upgrade does not make every known aggregate wait for its #1 again.
  const chainKey = chainOf(s.consumer, d, chain);
  const last = await lockChain(tx, chainKey, d, s.order === 'wait-for-gap' && chain === '');
  const clearGap = async () => {
    if (s.order === 'wait-for-gap') await clearGapRow(tx, consumer, eventId);
  };

  if (position <= last) {
    if (otherRoute) return { skip: 'duplicate' };
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

  const advance = () => advanceChain(tx, chainKey, position);
  if (position === last + 1n || s.order === 'ignore-stale') {
    await advance();
    await clearGap();
    if (otherRoute) return { skip: 'duplicate' };
    return { apply: position === last + 1n ? 'next' : 'ahead' };
  }

  // 3. wait-for-gap, and #last+1 is missing.
  const waited = await gapWaited(tx, s, eventId);
  if (waited < s.gapWaitSeconds) {
    throw new InboxGapError(
      `event ${eventId} is #${position} of ${describeChain(d, chain)} but #${last + 1n} was not applied yet (waited ${waited.toFixed(0)} of ${s.gapWaitSeconds} s); failing so that Lambda retries it`,
      waited,
    );
  }
  // The wait is over: the chain moves on past the gap (the missing events, if they come, are
  // applied late), so that neither this event nor a parked one holds the aggregate back.
  await advance();
  await clearGap();
  if (otherRoute) return { skip: 'duplicate' };
  if (s.onGapTimeout === 'park') {
    await markParked(
      tx,
      consumer,
      key,
      event,
      `#${last + 1n}…#${position - 1n} of ${describeChain(d, chain)} still missing after ${waited.toFixed(0)} s`,
    );
    return { skip: 'parked' };
  }
  return { apply: 'ahead' };
}

function describeChain(d: Delivery<unknown>, chain: string): string {
  const aggregate = `${d.metadata.aggregateType}/${d.metadata.aggregateId} from ${d.source}`;
  return chain === '' ? aggregate : `${chain} of ${aggregate}`;
}

/** The key of the chain's state row. */
function chainOf(consumer: string, d: Delivery<unknown>, chain: string): ChainKey {
  return {
    consumer,
    aggregateType: d.metadata.aggregateType,
    aggregateId: d.metadata.aggregateId,
    source: d.source,
    chain,
  };
}

/**
 * Locks the chain's state row and returns its position, creating the row at 0 (nothing taken yet)
 * when the chain is new, or, with `adopt`, at the position of the row written before migration 010
 * for the aggregate (source ''), if there is one. Another source's events may then be taken as late
 * (applied) once; not adopting would make each known aggregate wait out a gap for its #1.
 */
async function lockChain(tx: Tx, key: ChainKey, d: Delivery<unknown>, adopt: boolean): Promise<bigint> {
  // Two rounds at most: the insert meets a row another transaction created meanwhile only once.
  for (let round = 0; round < 2; round++) {
    const last = await lockChainRound(tx, key, adopt);
    if (last !== undefined) return last;
  }
  throw new Error(`inbox: the order state of ${describeChain(d, key.chain)} could not be locked`);
}

/**
 * How long this event has waited for its gap, seconds, on the database clock: 0 on its first
 * delivery, and again when its last attempt is older than the retry window (a replay days later
 * waits anew, instead of finding its old wait long over and skipping the gap at once).
 */
async function gapWaited(tx: Tx, s: OrderSettings, eventId: string): Promise<number> {
  const row = await readGap(tx, s.consumer, eventId);
  if (!row || row.idle > s.retryWindowSeconds) return 0;
  return Math.max(0, row.waited);
}

/**
 * After an {@link InboxGapError} rolled the invocation back: remembers, outside any transaction,
 * when the event was first seen waiting (kept across Lambda's retries) and last seen.
 */
export function rememberGap(sql: Sql, s: OrderSettings, eventId: string) {
  return rememberGapRow(sql, s.consumer, eventId, s.retryWindowSeconds);
}
