/**
 * Producer API: write events into the outbox inside the caller's own transaction, so an event
 * exists if and only if the business change committed (README, Guarantees: "Atomic enqueue").
 *
 * ```ts
 * await sql.begin(async (tx) => {
 *   await tx`insert into orders ${tx(order)}`;
 *   await enqueue(tx, { type: 'OrderPlaced', source: 'shop.orders', aggregateType: 'order',
 *                       aggregateId: order.id, payload: { total: order.total } });
 * });
 * ```
 */
import { randomUUID } from 'node:crypto';
import type { Queryable, Sql } from '../platform/index.ts';
import type { EnqueueOptions, EnqueueResult, OutboxEvent } from './types.ts';
import { type ValidEvent, validateEvent } from './validation.ts';

/**
 * Enqueues one event in the caller's transaction. Validates first; nothing is written when it throws.
 * @param tx a transaction from `sql.begin` (a plain pool works too, but then the event is not atomic with anything)
 * @throws {OutboxValidationError} naming the bad field
 * @throws the database's error (e.g. the caller's transaction was aborted)
 */
export async function enqueue(
  tx: Queryable,
  event: OutboxEvent,
  options: EnqueueOptions = {},
): Promise<EnqueueResult> {
  const [result] = await enqueueMany(tx, [event], options);
  return result as EnqueueResult;
}

/**
 * Enqueues several events in the caller's transaction with one statement (two when idempotency
 * keys are given). All are validated before anything is written. Results come back in input order.
 * @throws {OutboxValidationError} with `index` set to the first bad event's position
 */
export async function enqueueMany(
  tx: Queryable,
  events: readonly OutboxEvent[],
  options: EnqueueOptions = {},
): Promise<EnqueueResult[]> {
  const valid = events.map((event, index) =>
    validateEvent(event, options, events.length > 1 ? index : undefined),
  );
  if (valid.length === 0) return [];
  // Called on a pool rather than in a transaction: make the call one transaction of its own, so the
  // idempotency locks and the sequence bump hold until the insert commits.
  if ('begin' in tx && typeof tx.begin === 'function') {
    return (tx as Sql).begin((inner) => insertValid(inner, valid));
  }
  return insertValid(tx, valid);
}

async function insertValid(tx: Queryable, valid: ValidEvent[]): Promise<EnqueueResult[]> {
  const results: (EnqueueResult | undefined)[] = new Array(valid.length);
  /** For a key repeated inside this call: the index of its first occurrence. */
  const repeatOf = new Map<number, number>();
  const keys = [
    ...new Set(valid.flatMap((e) => (e.idempotencyKey === null ? [] : [e.idempotencyKey]))),
  ].sort();
  const existing = new Map<string, EnqueueResult>();
  if (keys.length > 0) {
    // A transaction-scoped advisory lock per key serialises concurrent producers of one key
    // *before* the sequence is bumped: the loser waits, then (in a new statement, hence a new
    // snapshot) sees the winner's row and writes nothing, so a duplicate never leaves a gap in
    // the aggregate's sequence. Keys are locked in sorted order to avoid deadlocks.
    await tx`select pg_advisory_xact_lock(hashtextextended(k, 7301)) from unnest(${keys}::text[]) as k`;
    const rows = await tx<
      {
        idempotency_key: string;
        event_id: string;
        aggregate_type: string;
        aggregate_id: string;
        sequence: string;
      }[]
    >`
      select idempotency_key, event_id, aggregate_type, aggregate_id, sequence
      from outbox where idempotency_key = any(${keys}::text[])
    `;
    for (const r of rows) {
      existing.set(r.idempotency_key, {
        eventId: r.event_id,
        aggregateType: r.aggregate_type,
        aggregateId: r.aggregate_id,
        sequence: Number(r.sequence),
        duplicate: true,
      });
    }
  }

  const toInsert: typeof valid = [];
  const firstIndexOfKey = new Map<string, number>();
  valid.forEach((e, i) => {
    const key = e.idempotencyKey;
    if (key !== null) {
      const prior = existing.get(key);
      if (prior) {
        results[i] = prior;
        return;
      }
      const first = firstIndexOfKey.get(key);
      if (first !== undefined) {
        repeatOf.set(i, first);
        return;
      }
      firstIndexOfKey.set(key, i);
    }
    toInsert.push(e);
  });

  if (toInsert.length > 0) {
    const ids = toInsert.map(() => randomUUID());
    // One statement: bump each aggregate's counter by its number of new events (rows sorted so
    // concurrent producers lock aggregates in the same order), then insert every event with
    // sequence = new counter − count + its rank among this call's events of that aggregate.
    const rows = await tx<{ event_id: string; sequence: string }[]>`
      with input as (
        select *
        from unnest(
          ${ids}::uuid[], ${toInsert.map((e) => e.aggregateType)}::text[], ${toInsert.map((e) => e.aggregateId)}::text[],
          ${toInsert.map((e) => e.type)}::text[], ${toInsert.map((e) => e.source)}::text[],
          ${toInsert.map((e) => e.payloadJson)}::text[], ${toInsert.map((e) => e.traceHeader)}::text[],
          ${toInsert.map((e) => e.idempotencyKey)}::text[]
        ) with ordinality as t(event_id, aggregate_type, aggregate_id, event_type, source, payload, trace_header, idempotency_key, ord)
      ),
      bumped as (
        insert into outbox_aggregate as a (aggregate_type, aggregate_id, last_sequence)
        select aggregate_type, aggregate_id, count(*) from input
        group by aggregate_type, aggregate_id
        order by aggregate_type, aggregate_id
        on conflict (aggregate_type, aggregate_id)
          do update set last_sequence = a.last_sequence + excluded.last_sequence
        returning a.aggregate_type, a.aggregate_id, a.last_sequence
      ),
      numbered as (
        select i.*, b.last_sequence
          - count(*) over (partition by i.aggregate_type, i.aggregate_id)
          + row_number() over (partition by i.aggregate_type, i.aggregate_id order by i.ord) as sequence
        from input i
        join bumped b using (aggregate_type, aggregate_id)
      )
      insert into outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, source, payload, trace_header, idempotency_key)
      select event_id, aggregate_type, aggregate_id, sequence, event_type, source, payload::jsonb, trace_header, idempotency_key
      from numbered
      order by ord
      returning event_id, sequence
    `;
    const sequenceById = new Map(rows.map((r) => [r.event_id, Number(r.sequence)]));
    let j = 0;
    valid.forEach((e, i) => {
      if (results[i] !== undefined || repeatOf.has(i)) return;
      const eventId = ids[j++] as string;
      results[i] = {
        eventId,
        aggregateType: e.aggregateType,
        aggregateId: e.aggregateId,
        sequence: sequenceById.get(eventId) as number,
        duplicate: false,
      };
    });
  }

  for (const [i, first] of repeatOf) results[i] = { ...(results[first] as EnqueueResult), duplicate: true };
  return results as EnqueueResult[];
}
