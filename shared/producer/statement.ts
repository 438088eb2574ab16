/**
 * The enqueue statement, shared by every producer path: its parameters (parallel arrays, one
 * element per event), its text for drivers with positional parameters, and its row type.
 * The porsager path (enqueue.ts) writes the same call as a tagged template.
 */
import type { EnqueueResult } from './types.ts';
import type { ValidEvent } from './validation.ts';

/** A row of `outbox_enqueue_many`: one per input event, `ord` from 1 in input order. */
export interface EnqueuedRow {
  ord: number;
  event_id: string;
  aggregate_type: string;
  aggregate_id: string;
  /** int8 arrives as a string from every Node driver. */
  sequence: string | number;
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
export const ENQUEUE_MANY_SQL = `select ord, event_id, aggregate_type, aggregate_id, sequence, duplicate
from outbox_enqueue_many($1::text[], $2::text[], $3::text[], $4::text[], $5::text[]::jsonb[], $6::text[], $7::text[], $8::integer)`;

/** Maps the rows (in any order) to results in input order. */
export function toResults(rows: readonly EnqueuedRow[]): EnqueueResult[] {
  return [...rows]
    .sort((a, b) => Number(a.ord) - Number(b.ord))
    .map((r) => ({
      eventId: r.event_id,
      aggregateType: r.aggregate_type,
      aggregateId: r.aggregate_id,
      sequence: Number(r.sequence),
      duplicate: r.duplicate,
    }));
}
