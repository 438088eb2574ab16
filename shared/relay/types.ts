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
  sequence: number;
  /** Rank among its aggregate's events of the same type; undefined before migration 010. */
  typeSequence?: number;
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
