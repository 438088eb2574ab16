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
  const inserted = await tx`
    insert into inbox_message (consumer, message_key, event_id, source, event_type, aggregate_type, aggregate_id, sequence)
    values (${consumer}, ${key}, ${eventId}, ${d.source}, ${d.type}, ${aggregateType}, ${aggregateId}, ${String(d.sequence)})
    on conflict do nothing
    returning 1`;
  let otherRoute = false;
  if (inserted.length === 0) {
    const [existing] = await tx<{ outcome: string; event_id: string | null }[]>`
      select outcome, event_id from inbox_message
      where consumer = ${consumer} and message_key = ${key}
      for update`;
    const same = !existing || existing.event_id === null || existing.event_id === eventId;
    if (same && existing?.outcome === 'replaying') {
      // An operator asked for this parked event to be applied: this delivery does it.
      await tx`
        update inbox_message
        set outcome = 'processed', processed_at = now(), event = null,
            reason = 'parked, then replayed by an operator: ' || coalesce(reason, '')
        where consumer = ${consumer} and message_key = ${key}`;
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
  const last = await lockChain(tx, s.consumer, d, chain, s.order === 'wait-for-gap' && chain === '');
  const chainKey = chainWhere(tx, s.consumer, d, chain);
  const clearGap = async () => {
    if (s.order === 'wait-for-gap')
      await tx`delete from inbox_gap where consumer = ${consumer} and message_key = ${eventId}`;
  };

  if (position <= last) {
    if (otherRoute) return { skip: 'duplicate' };
    if (s.order === 'ignore-stale') {
      await tx`
        update inbox_message
        set outcome = 'stale', reason = ${`superseded by #${last} of its chain (${describeChain(d, chain)}), applied before it`}
        where consumer = ${consumer} and message_key = ${key}`;
      return { skip: 'stale' };
    }
    await clearGap();
    return { apply: 'late' };
  }

  const advance = () => tx`
    update inbox_aggregate set last_sequence = ${String(position)}, updated_at = now()
    where ${chainKey}`;
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
    await tx`
      update inbox_message
      set outcome = 'parked', event = ${tx.json(event as never)},
          reason = ${`#${last + 1n}…#${position - 1n} of ${describeChain(d, chain)} still missing after ${waited.toFixed(0)} s`}
      where consumer = ${consumer} and message_key = ${key}`;
    return { skip: 'parked' };
  }
  return { apply: 'ahead' };
}

function describeChain(d: Delivery<unknown>, chain: string): string {
  const aggregate = `${d.metadata.aggregateType}/${d.metadata.aggregateId} from ${d.source}`;
  return chain === '' ? aggregate : `${chain} of ${aggregate}`;
}

/** The WHERE condition that names one chain's row. */
function chainWhere(tx: Tx, consumer: string, d: Delivery<unknown>, chain: string) {
  return tx`consumer = ${consumer} and aggregate_type = ${d.metadata.aggregateType}
    and aggregate_id = ${d.metadata.aggregateId} and source = ${d.source} and chain = ${chain}`;
}

/**
 * Locks the chain's state row and returns its position, creating the row at 0 (nothing taken yet)
 * when the chain is new, or, with `adopt`, at the position of the row written before migration 010
 * for the aggregate (source ''), if there is one. Another source's events may then be taken as late
 * (applied) once; not adopting would make each known aggregate wait out a gap for its #1.
 */
async function lockChain(
  tx: Tx,
  consumer: string,
  d: Delivery<unknown>,
  chain: string,
  adopt: boolean,
): Promise<bigint> {
  const where = chainWhere(tx, consumer, d, chain);
  // Two rounds at most: the insert meets a row another transaction created meanwhile only once.
  for (let round = 0; round < 2; round++) {
    const [row] = await tx<{ last_sequence: string }[]>`
      select last_sequence from inbox_aggregate where ${where} for update`;
    if (row) return BigInt(row.last_sequence);
    const [created] = await tx<{ last_sequence: string }[]>`
      insert into inbox_aggregate (consumer, aggregate_type, aggregate_id, source, chain, last_sequence)
      values (${consumer}, ${d.metadata.aggregateType}, ${d.metadata.aggregateId}, ${d.source}, ${chain}, coalesce((
        select l.last_sequence from inbox_aggregate l
        where l.consumer = ${consumer} and l.aggregate_type = ${d.metadata.aggregateType}
          and l.aggregate_id = ${d.metadata.aggregateId} and l.source = '' and l.chain = ''
          and ${adopt}::boolean), 0))
      on conflict do nothing
      returning last_sequence`;
    if (created) return BigInt(created.last_sequence);
  }
  throw new Error(`inbox: the order state of ${describeChain(d, chain)} could not be locked`);
}

/**
 * How long this event has waited for its gap, seconds, on the database clock: 0 on its first
 * delivery, and again when its last attempt is older than the retry window (a replay days later
 * waits anew, instead of finding its old wait long over and skipping the gap at once).
 */
async function gapWaited(tx: Tx, s: OrderSettings, eventId: string): Promise<number> {
  const [row] = await tx<{ waited: number; idle: number }[]>`
    select extract(epoch from now() - first_seen_at)::float8 as waited,
           extract(epoch from now() - last_seen_at)::float8 as idle
    from inbox_gap where consumer = ${s.consumer} and message_key = ${eventId}`;
  if (!row || row.idle > s.retryWindowSeconds) return 0;
  return Math.max(0, row.waited);
}

/**
 * After an {@link InboxGapError} rolled the invocation back: remembers, outside any transaction,
 * when the event was first seen waiting (kept across Lambda's retries) and last seen.
 */
export function rememberGap(sql: Sql, s: OrderSettings, eventId: string) {
  return sql`
    insert into inbox_gap as g (consumer, message_key, first_seen_at, last_seen_at)
    values (${s.consumer}, ${eventId}, now(), now())
    on conflict (consumer, message_key) do update set
      first_seen_at = case when g.last_seen_at < now() - make_interval(secs => ${s.retryWindowSeconds})
                           then now() else g.first_seen_at end,
      last_seen_at = now()`;
}
