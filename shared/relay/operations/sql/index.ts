/**
 * Every SQL statement of the operations, one module each (grouped where statements share a row
 * type or count what another deletes), next to the row type it returns, as in `relay/sql/`. No
 * other operations module writes SQL but roles.ts, whose statements are the grants themselves.
 */

export {
  advanceCounterBatch,
  type CounterKey,
  countCounters,
  type DbAdvancedBatch,
  type DbCounterTotals,
  limitLockWait,
  selectKnownTypes,
} from './advance-counters.ts';
export { expiredDeadLetter } from './conditions.ts';
export {
  countInBackoff,
  type DbBackoffCount,
  type DbLastError,
  selectLastErrors,
} from './count-backoff.ts';
export { countClaimable, type DbClaimable, THROTTLE_SCAN_ROWS } from './count-claimable.ts';
export { countExpiredKeys, countExpiredRows, type DbExpiredCounts } from './count-expired.ts';
export { countOutbox, type DbOutboxCounts } from './count-outbox.ts';
export { deleteDeadLetters } from './delete-dead-letters.ts';
export { deleteIdempotencyKeys } from './delete-idempotency-keys.ts';
export { deletePublished } from './delete-published.ts';
export { discardDeadLetterRows } from './discard-dead-letters.ts';
export { type DbHeartbeat, enqueueHeartbeatRow } from './enqueue-heartbeat.ts';
export { replayDeadLetterRows } from './replay-dead-letters.ts';
export { type DeadLetterCriteria, selectDeadLetterIds } from './select-dead-letter-ids.ts';
export {
  type DbDeadLetter,
  selectDeadLetter,
  selectDeadLetterRefs,
  selectDeadLetters,
} from './select-dead-letters.ts';
export { type DbHoldingDeadLetter, selectHoldingDeadLetters } from './select-held-back.ts';
