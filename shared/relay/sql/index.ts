/**
 * Every SQL statement of the relay, one module each, next to the row type it returns (the
 * graphile-worker `src/sql` layout). No other relay module writes SQL.
 */
export { abandonLease } from './abandon-lease.ts';
export {
  type ClaimOptions,
  claimBatch,
  claimBatchKept,
  type DbClaimedRow,
  toClaimedEvent,
} from './claim-batch.ts';
export { claimableNow, pendingRow, pendingRowById, unpublishedRow } from './conditions.ts';
export { countHeldBack, type HeldBack, type HoldBackPolicy, hasPending } from './has-pending.ts';
export { markPublished, type PublishedHistory } from './mark-published.ts';
export { mayDeleteOutboxRows } from './may-delete.ts';
export { outboxIdOf, readOutboxId } from './outbox-identity.ts';
export { type Failure, recordFailures } from './record-failures.ts';
export { releaseUnsent, type UnsentRow } from './release-unsent.ts';
export { renewLease } from './renew-lease.ts';
export { startRound } from './start-round.ts';
export { unparkNextEvents } from './unpark-next-events.ts';
