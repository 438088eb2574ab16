/**
 * Every SQL statement of the inbox, one module each (the gap's three share one), next to the row
 * type it returns, as in `relay/sql/`. No other consumer module writes SQL.
 */
export { advanceChain } from './advance-chain.ts';
export { type ChainKey, chainRow, outboxChain, ownChainKey } from './chain.ts';
export { type FailureRecord, recordFailure, UNFINISHED_ATTEMPT } from './failed.ts';
export { clearGap, type DbGapWait, type GapPlace, readGap, rememberGap } from './gap.ts';
export {
  type DbHeldEvent,
  markHeld,
  readHandlerFailures,
  readHolder,
  readHoldsChain,
} from './hold.ts';
export {
  adoptChain,
  type DbChainState,
  type LockedChain,
  lockChain,
  readChainPosition,
} from './lock-chain.ts';
export { type DbMessageOutcome, lockMessage } from './lock-message.ts';
export { markParked } from './mark-parked.ts';
export { markReplayed } from './mark-replayed.ts';
export { markStale } from './mark-stale.ts';
export { type MessageRecord, recordMessage } from './record-message.ts';
export {
  type DbTransactionIdentity,
  readAssignedTransactionIdentity,
  readTransactionIdentity,
} from './transaction-identity.ts';
