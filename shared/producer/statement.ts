/**
 * The enqueue statements, shared by every producer path: which database function a call takes,
 * its parameters, its text for drivers with positional parameters, and the rows it returns.
 *
 * - One event without an idempotency key (every plain `enqueue`): `outbox_enqueue`. Both functions
 *   are SECURITY DEFINER PL/pgSQL with a pinned search_path, and `outbox_enqueue_many` hands such
 *   an event to `outbox_enqueue` anyway (migration 011), so calling it directly saves one function
 *   call in the user's database (docs/investigations/database-cost.md#what-moved-the-databases-cost).
 * - Anything else (several events, or any idempotency key): `outbox_enqueue_many`, parallel arrays
 *   with one element per event. `outbox_enqueue` itself sends a key to that function, for its
 *   advisory lock and duplicate lookup, so going there directly is the one call.
 *
 * Both take the same locks and number events the same way. The porsager path (enqueue.ts), Drizzle
 * and Kysely write the same calls as tagged templates.
 */
import { DEFAULT_MAX_REQUEST_BYTES } from '../platform/envelope.ts';
import { translateEnqueueError } from './sql-errors.ts';
import type { EnqueueOptions, EnqueueResult, OutboxEvent } from './types.ts';
import { type ValidEvent, validateEvent } from './validation.ts';

/**
 * A row of `outbox_enqueue_many`: one per input event, `ord` from 1 in input order. A call of
 * `outbox_enqueue` is mapped to the same shape ({@link fromEnqueueOne}).
 */
export interface EnqueuedRow {
  ord: number;
  event_id: string;
  aggregate_type: string;
  aggregate_id: string;
  /** int8, selected as text (`sequence::text`) so that no driver's int8 parser can round it. */
  sequence: string;
  duplicate: boolean;
}

/** The arguments of `outbox_enqueue_many`, in its parameter order. */
export interface EnqueueParameters {
  eventTypes: string[];
  sources: string[];
  aggregateTypes: string[];
  aggregateIds: string[];
  /** JSON text, cast to jsonb[] by the statement. */
  payloads: string[];
  idempotencyKeys: (string | null)[];
  traceHeaders: (string | null)[];
  maxEntryBytes: number;
}

/** Builds the arguments for validated events. */
export function enqueueParameters(valid: readonly ValidEvent[], maxEntryBytes: number): EnqueueParameters {
  return {
    eventTypes: valid.map((e) => e.type),
    sources: valid.map((e) => e.source),
    aggregateTypes: valid.map((e) => e.aggregateType),
    aggregateIds: valid.map((e) => e.aggregateId),
    payloads: valid.map((e) => e.payloadJson),
    idempotencyKeys: valid.map((e) => e.idempotencyKey),
    traceHeaders: valid.map((e) => e.traceHeader),
    maxEntryBytes,
  };
}

/**
 * The arguments of `outbox_enqueue` for a call that takes the single-event path (one event, no
 * idempotency key: the function's own default, null, is left to it).
 */
export interface EnqueueOneParameters {
  eventType: string;
  source: string;
  aggregateType: string;
  aggregateId: string;
  /** JSON text, cast to jsonb by the statement. */
  payload: string;
  traceHeader: string | null;
  maxEntryBytes: number;
}

/**
 * Decides which function a call takes: the arguments of `outbox_enqueue` for exactly one event
 * without an idempotency key, else null (the call goes to `outbox_enqueue_many`). The only place
 * the decision is made; see the header for why.
 */
export function enqueueOneParameters(
  valid: readonly ValidEvent[],
  maxEntryBytes: number,
): EnqueueOneParameters | null {
  const [event] = valid;
  if (valid.length !== 1 || event === undefined || event.idempotencyKey !== null) return null;
  return {
    eventType: event.type,
    source: event.source,
    aggregateType: event.aggregateType,
    aggregateId: event.aggregateId,
    payload: event.payloadJson,
    traceHeader: event.traceHeader,
    maxEntryBytes,
  };
}

/** A row of `outbox_enqueue` (it returns exactly one, or raises). */
export interface EnqueuedOneRow {
  event_id: string;
  /** int8, selected as text (`sequence::text`), as in {@link EnqueuedRow}. */
  sequence: string;
  duplicate: boolean;
}

/**
 * Maps `outbox_enqueue`'s rows to the {@link EnqueuedRow} of the one event: `ord` 1, the aggregate
 * as sent (the function returns only id, sequence and duplicate).
 * @throws Error when there is no row (the function's contract is one row or an error)
 */
export function fromEnqueueOne(p: EnqueueOneParameters, rows: readonly EnqueuedOneRow[]): EnqueuedRow[] {
  const [row] = rows;
  if (row === undefined) throw new Error('outbox_enqueue returned no row');
  return [
    {
      ord: 1,
      event_id: row.event_id,
      aggregate_type: p.aggregateType,
      aggregate_id: p.aggregateId,
      sequence: String(row.sequence),
      duplicate: row.duplicate,
    },
  ];
}

/** The parameters as a positional list, for {@link ENQUEUE_ONE_SQL}. */
export function positionalOne(p: EnqueueOneParameters): unknown[] {
  return [p.eventType, p.source, p.aggregateType, p.aggregateId, p.payload, p.traceHeader, p.maxEntryBytes];
}

/** `outbox_enqueue` with `$1`…`$7` placeholders (node-postgres and other positional drivers). */
export const ENQUEUE_ONE_SQL = `select event_id, sequence::text as sequence, duplicate
from outbox.outbox_enqueue(event_type => $1::text, source => $2::text, aggregate_type => $3::text, aggregate_id => $4::text,
  payload => $5::text::jsonb, trace_header => $6::text, max_entry_bytes => $7::integer)`;

/** The parameters as a positional list, for {@link ENQUEUE_MANY_SQL}. */
export function positional(p: EnqueueParameters): unknown[] {
  return [
    p.eventTypes,
    p.sources,
    p.aggregateTypes,
    p.aggregateIds,
    p.payloads,
    p.idempotencyKeys,
    p.traceHeaders,
    p.maxEntryBytes,
  ];
}

/** The statement with `$1`…`$8` placeholders (node-postgres and other positional drivers). */
export const ENQUEUE_MANY_SQL = `select ord, event_id, aggregate_type, aggregate_id, sequence::text as sequence, duplicate
from outbox.outbox_enqueue_many($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]::jsonb[], $6::text[], $7::text[], $8::integer)`;

/** Maps the rows (in any order) to results in input order. */
export function toResults(rows: readonly EnqueuedRow[]): EnqueueResult[] {
  return [...rows]
    .sort((a, b) => Number(a.ord) - Number(b.ord))
    .map((r) => ({
      eventId: r.event_id,
      aggregateType: r.aggregate_type,
      aggregateId: r.aggregate_id,
      sequence: String(r.sequence),
      duplicate: r.duplicate,
    }));
}

/** How one driver runs each statement on its client and returns the rows. */
export interface EnqueueStatements<C> {
  /** `outbox_enqueue` (as {@link ENQUEUE_ONE_SQL}): one event without an idempotency key. */
  one(client: C, parameters: EnqueueOneParameters): Promise<readonly EnqueuedOneRow[]>;
  /** `outbox_enqueue_many` (as {@link ENQUEUE_MANY_SQL}): every other call. */
  many(client: C, parameters: EnqueueParameters): Promise<readonly EnqueuedRow[]>;
}

/** The producer API over one driver: what the main entry point and each adapter export. */
export interface Producer<C> {
  enqueue(client: C, event: OutboxEvent, options?: EnqueueOptions): Promise<EnqueueResult>;
  enqueueMany(client: C, events: readonly OutboxEvent[], options?: EnqueueOptions): Promise<EnqueueResult[]>;
}

/** Set by `traceEnqueues` of `outbox-relay-aws/otel` (otel.ts): the trace header of events enqueued without one. */
export const enqueueHooks: { traceHeader?: (() => string | undefined) | undefined } = {};

function traceUntraced(valid: ValidEvent[]): void {
  const header = enqueueHooks.traceHeader?.();
  if (header !== undefined) for (const v of valid) v.traceHeader ??= header;
}

/**
 * Builds `enqueue` and `enqueueMany` for a driver: every event is validated before anything is
 * sent, all of them go in one statement (`outbox_enqueue` for one event without a key, else
 * `outbox_enqueue_many`: {@link enqueueOneParameters}), a database error is translated (deadlock,
 * SQL-side validation, missing schema), and the results come back in input order. Only the
 * statements' runners differ by driver.
 */
export function producerFor<C>(statements: EnqueueStatements<C>): Producer<C> {
  const enqueueMany: Producer<C>['enqueueMany'] = async (client, events, options = {}) => {
    const valid = events.map((event, index) =>
      validateEvent(event, options, events.length > 1 ? index : undefined),
    );
    if (valid.length === 0) return [];
    traceUntraced(valid);
    const maxEntryBytes = options.maxEntryBytes ?? DEFAULT_MAX_REQUEST_BYTES;
    const one = enqueueOneParameters(valid, maxEntryBytes);
    let rows: readonly EnqueuedRow[];
    try {
      rows = one
        ? fromEnqueueOne(one, await statements.one(client, one))
        : await statements.many(client, enqueueParameters(valid, maxEntryBytes));
    } catch (error) {
      throw translateEnqueueError(error, valid);
    }
    return toResults(rows);
  };
  return {
    enqueueMany,
    async enqueue(client, event, options) {
      const [result] = await enqueueMany(client, [event], options);
      return result as EnqueueResult;
    },
  };
}
