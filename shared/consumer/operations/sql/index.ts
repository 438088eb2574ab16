/**
 * Every SQL statement of the consumer's operations (parked and failed events, the inbox's pruning
 * and counts), one module each, next to the row type it returns, as in `relay/operations/sql/`.
 */
export {
  countInboxExpired,
  countInboxParked,
  type DbInboxExpired,
  type DbInboxParked,
} from './count-inbox.ts';
export {
  deleteExpiredChains,
  deleteExpiredFailures,
  deleteExpiredGaps,
  deleteExpiredMessages,
} from './delete-inbox-expired.ts';
export {
  type DbParkedEvent,
  discardParkedRows,
  markReplaying,
  selectInboxOutcome,
  selectParked,
} from './parked.ts';
export {
  type DbFailedEvent,
  hasFailureTrace,
  selectFailed,
  selectFailedForReplay,
} from './select-failed.ts';
