/**
 * Domain types of the relay core (camelCase). The row types that mirror the table (snake_case) live
 * next to their statements in sql/, each with its one mapping.
 */

/** A claimed event, leased to one relay until `lease_expires_at` (database clock). */
export interface ClaimedEvent {
  /** Row id (int8, kept as a string: `postgres` returns int8 as text and BigInt does not serialise). */
  id: string;
  eventId: string;
  aggregateType: string;
  aggregateId: string;
  /** Per-aggregate sequence (int8, as decimal text, exact beyond 2^53). */
  sequence: string;
  /** Rank among its aggregate's events of the same type (int8, as decimal text); undefined before migration 010. */
  typeSequence?: string;
  type: string;
  source: string;
  /** The payload's compact JSON text, every number as stored. */
  payloadJson: string;
  traceHeader: string | null;
  createdAt: Date;
  /** Claims so far, this one included. */
  attempts: number;
  /** Claimed as its aggregate's head (the others came along as its successors). */
  isHead: boolean;
  /**
   * The outbox's id (`outbox.outbox_identity`, migration 031), written into the Detail as
   * `metadata.outboxId`; set by the pass after the claim, undefined when the database has none.
   */
  outboxId?: string;
}
