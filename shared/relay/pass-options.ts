/**
 * What a pass is given (see pass.ts): its dependencies ({@link RelayDeps}: the database, the bus,
 * the settings, the shared slots and answer timeout), its options ({@link PassOptions}: the
 * invocation's deadline, the back-pressure streak, the model-based test's claim and checkpoints),
 * and what it reports of each failed event ({@link RelayFailure}).
 */
import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import type { ConnectionPool, RelaySettings, Sql } from '../platform/index.ts';
import type { AnswerTimeout } from './answer-timeout.ts';
import type { Publisher } from './buses/index.ts';
import type { Semaphore } from './semaphore.ts';
import type { ClaimOptions } from './sql/index.ts';
import type { ClaimedEvent } from './types.ts';

/** What a pass needs. */
export interface RelayDeps {
  /**
   * The database. Give a {@link ConnectionPool} (see `openPool`) so the loop can replace the
   * connections after one broke or stopped answering; a plain pool works but is never replaced.
   */
  sql: Sql | ConnectionPool;
  /** The classic bus's client, used when no `publisher` is given. */
  client?: EventBridgeClient;
  /**
   * Where events are put (buses/publisher.ts): default the classic bus through `client`. The Custom
   * Event Bus's is `eventsV2Publisher` (createRelay picks it when `OUTBOX_EVENT_BUS_ARN` is set).
   */
  publisher?: Publisher;
  settings: RelaySettings;
  /** Source of randomness for backoff jitter; tests may fix it. */
  random?: () => number;
  /** Caps PutEvents calls in flight across concurrent passes; default: `publishConcurrency` per pass. */
  publishSlots?: Semaphore;
  /**
   * How long a PutEvents attempt waits for the answer, learned from the bus; share one across the
   * passes of a relay (the loop does). Default: a new one per pass (3 s until it learns).
   */
  answerTimeout?: AnswerTimeout;
  /**
   * Called for every event that failed in a pass once its retry or dead letter is recorded, with
   * the reason kept in its `last_error` (not for one whose lease another relay took meanwhile).
   */
  onFailure?: (failure: RelayFailure) => void;
}

/** An event that failed in a pass: retried later, or dead-lettered. */
export interface RelayFailure {
  eventId: string;
  /** `ErrorCode: message`, as recorded in `last_error`. */
  reason: string;
  deadLettered: boolean;
}

/** Options of one pass. */
export interface PassOptions {
  /** `performance.now()` by which the pass must have returned (a Lambda's deadline less a margin). */
  endBy?: number;
  /**
   * Passes in a row that met back-pressure before this one: back-pressured rows back off as if
   * this were their attempt `streak + 1` (their own attempt count does not grow).
   */
  backPressureStreak?: number;
  /**
   * Runs the claim instead of the pass (default: `claimBatchKept` on `deps.sql`); it must call
   * `keep` with the answer before committing, and roll back when `keep` throws (the pass gave up
   * on the claim). The model-based test runs it inside a transaction it commits later, so that
   * other claims overlap an uncommitted one in Postgres.
   */
  claim?: (options: ClaimOptions, keep: (events: ClaimedEvent[]) => void) => Promise<ClaimedEvent[]>;
  /**
   * Awaited at each step of the pass (see {@link PassCheckpoint}), with no statement or call in
   * flight; a rejection ends the pass there, leaving its rows leased as a crash would. For the
   * model-based test, which interleaves passes step by step; not bounded by the pass's deadlines.
   */
  checkpoint?: (at: PassCheckpoint) => Promise<void>;
}

/**
 * The steps at which a pass awaits {@link PassOptions.checkpoint}: the claim answered; a round is
 * about to start (its successors' attempts not spent yet, nothing sent); the start of a round's
 * successors answered, not yet taken in (a rejection there is that answer lost); a round's
 * PutEvents calls answered (nothing marked yet); the pass is about to hand back what is left and
 * unpark.
 */
export type PassCheckpoint = 'claimed' | 'round' | 'started' | 'sent' | 'finishing';
