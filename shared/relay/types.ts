/** Row and domain types of the relay core (snake_case mirrors the table; camelCase is used elsewhere). */

/** An outbox row as the claim statement returns it. */
export interface DbClaimedRow {
  id: string;
  event_id: string;
  aggregate_type: string;
  aggregate_id: string;
  sequence: string;
  event_type: string;
  source: string;
  /** jsonb, parsed by the driver. */
  payload: Record<string, unknown>;
  trace_header: string | null;
  created_at: Date;
  attempts: number;
  /** True for the row the claim took as its aggregate's head (always true with ordering `none`). */
  is_head: boolean;
}

/** A claimed event, leased to one relay until `lease_expires_at` (database clock). */
export interface ClaimedEvent {
  /** Row id (int8, kept as a string: `postgres` returns int8 as text and BigInt does not serialise). */
  id: string;
  eventId: string;
  aggregateType: string;
  aggregateId: string;
  sequence: number;
  type: string;
  source: string;
  payloadJson: string;
  traceHeader: string | null;
  createdAt: Date;
  /** Claims so far, this one included. */
  attempts: number;
  /** Claimed as its aggregate's head (the others came along as its successors). */
  isHead: boolean;
}

/** The one mapping from row to domain type. */
export function toClaimedEvent(row: DbClaimedRow): ClaimedEvent {
  return {
    id: row.id,
    eventId: row.event_id,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    sequence: Number(row.sequence),
    type: row.event_type,
    source: row.source,
    // Compact JSON, as enqueue measured it: jsonb's own text form adds spaces and spells out
    // numbers (5e-324 as 325 digits), which would make the entry larger than validated.
    payloadJson: JSON.stringify(row.payload),
    traceHeader: row.trace_header,
    createdAt: row.created_at,
    attempts: row.attempts,
    isHead: row.is_head,
  };
}
