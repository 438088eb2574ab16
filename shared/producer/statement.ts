/**
 * The enqueue statement, shared by every producer path: its parameters (parallel arrays, one
 * element per event), its text for drivers with positional parameters, and its row type.
 * The porsager path (enqueue.ts) writes the same call as a tagged template.
 */
import { DEFAULT_MAX_REQUEST_BYTES } from '../platform/envelope.ts';
import { translateEnqueueError } from './sql-errors.ts';
import type { EnqueueOptions, EnqueueResult, OutboxEvent } from './types.ts';
import { type ValidEvent, validateEvent } from './validation.ts';

/** A row of `outbox_enqueue_many`: one per input event, `ord` from 1 in input order. */
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
from outbox_enqueue_many($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]::jsonb[], $6::text[], $7::text[], $8::integer)`;

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

/** How one driver runs `outbox_enqueue_many` on its client and returns the rows. */
export type RunEnqueue<C> = (client: C, parameters: EnqueueParameters) => Promise<readonly EnqueuedRow[]>;

/** The producer API over one driver: what the main entry point and each adapter export. */
export interface Producer<C> {
  enqueue(client: C, event: OutboxEvent, options?: EnqueueOptions): Promise<EnqueueResult>;
  enqueueMany(client: C, events: readonly OutboxEvent[], options?: EnqueueOptions): Promise<EnqueueResult[]>;
}

/**
 * Builds `enqueue` and `enqueueMany` for a driver: every event is validated before anything is
 * sent, all of them go in one call of the statement, a database error is translated (deadlock,
 * SQL-side validation), and the results come back in input order. Only `run` differs by driver.
 */
export function producerFor<C>(run: RunEnqueue<C>): Producer<C> {
  const enqueueMany: Producer<C>['enqueueMany'] = async (client, events, options = {}) => {
    const valid = events.map((event, index) =>
      validateEvent(event, options, events.length > 1 ? index : undefined),
    );
    if (valid.length === 0) return [];
    const parameters = enqueueParameters(valid, options.maxEntryBytes ?? DEFAULT_MAX_REQUEST_BYTES);
    let rows: readonly EnqueuedRow[];
    try {
      rows = await run(client, parameters);
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
