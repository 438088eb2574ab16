/**
 * The inbox: a middy middleware for Lambdas that are targets of EventBridge rules, so that each
 * event is applied once per consumer although the outbox (and EventBridge) deliver at least once.
 *
 * Each invocation runs in one transaction (`sql.begin`, see invocation.ts): the middleware records
 * the event for this consumer (`inbox_message`, keyed by consumer and `metadata.eventId` or a
 * business key) and hands the handler that transaction as `context.inbox.tx`, so the handler's
 * writes commit together with the record, or not at all (README, Guarantees: a consumer invocation is all or nothing). A duplicate is
 * acknowledged without running the handler. Any failure rolls everything back and fails the
 * invocation: a handler error, a statement that failed even if the handler caught it, a lost
 * connection, or the deadline. Lambda's asynchronous invocation then retries it (twice by default,
 * 1 and 2 minutes later), and sends it to the function's on-failure destination after that.
 *
 * ```ts
 * export const handler = middy<EventBridgeEvent<'OrderPlaced', unknown>, void, Error, InboxContext<OrderPlaced>>()
 *   .use(inbox({ sql, consumer: 'billing', order: 'ignore-stale', schema: OrderPlaced.schema }))
 *   .handler(async (_event, { inbox }) => {
 *     await inbox.tx`insert into invoices ${inbox.tx({ order_id: inbox.metadata.aggregateId })}`;
 *   });
 * ```
 */
import type { MiddlewareObj } from '@middy/core';
import type { Context, EventBridgeEvent } from 'aws-lambda';
import type { z } from 'zod';
import type { EnvelopeMetadata, Sql, Tx } from '../platform/index.ts';
import { ConnectionPool, isConnectionFailure, OutboxError } from '../platform/index.ts';
import { InboxAbortedError, InvocationTransaction, lambdaDeadline } from './invocation.ts';

/** How an order-aware consumer treats an event that is not the next one of its aggregate. */
export type InboxOrder = 'none' | 'ignore-stale' | 'wait-for-gap';

/**
 * How long Lambda keeps retrying an asynchronous invocation that failed, seconds: by default it
 * retries a function error twice, one minute and then two minutes later ("How Lambda handles
 * errors and retries with asynchronous invocation", AWS Lambda Developer Guide). EventBridge
 * invokes rule targets asynchronously; the rule's own retry policy covers only getting the event
 * into Lambda's queue, not a handler that fails.
 */
export const LAMBDA_ASYNC_RETRY_WINDOW_SECONDS = 180;

/** Options of {@link inbox}. */
export interface InboxOptions<T> {
  /**
   * A pool; each invocation holds one of its connections for its transaction. Pass a
   * {@link ConnectionPool} (`new ConnectionPool(() => connect())`) so that an invocation that lost
   * its connection replaces the pool: porsager `postgres` 3.4.9 can otherwise hand the next
   * invocation of a warm container the dead session's error, or hang it (porsager/postgres#1199).
   */
  sql: Sql | ConnectionPool;
  /** This consumer's name: each consumer processes each event once, independently of the others. */
  consumer: string;
  /**
   * The deduplication key. Default: `metadata.eventId`. Key on a business identity instead when
   * the same fact can arrive by two routes with two event ids.
   */
  key?: (detail: { metadata: EnvelopeMetadata; data: T }) => string;
  /**
   * - `none` (default): any order.
   * - `ignore-stale`: an event whose sequence is not newer than the last applied one of its
   *   aggregate is acknowledged and skipped (the consumer keeps the latest state).
   * - `wait-for-gap`: an event that skips a sequence fails the invocation with an
   *   {@link InboxGapError}, so that Lambda retries it later, once the missing one has likely been
   *   applied. From the first delivery on, for at most `gapWaitSeconds`; the first attempt after
   *   that processes it anyway (the gap is accepted) or, with `onGapTimeout: 'park'`, acknowledges
   *   it as `parked` (kept in `inbox_message`, the handler not run). An aggregate never seen
   *   before expects sequence 1.
   */
  order?: InboxOrder;
  /**
   * wait-for-gap: how long to keep failing an event ahead of a gap, seconds, measured on the
   * database clock from its first delivery. Default 120, so that Lambda's last retry (about
   * 180 s after the first attempt) comes after the wait and applies or parks the event. Must be
   * less than `retryWindowSeconds`; 0 applies or parks at once.
   */
  gapWaitSeconds?: number;
  /** wait-for-gap: what to do after the wait. Default `process`. */
  onGapTimeout?: 'process' | 'park';
  /**
   * How long the invoker retries a failed invocation, seconds; bounds `gapWaitSeconds`. Default
   * {@link LAMBDA_ASYNC_RETRY_WINDOW_SECONDS} (180, Lambda's default asynchronous retries). Set it
   * when the function's `MaximumRetryAttempts` is not 2 (0 retries: 0; 1 retry: 60).
   */
  retryWindowSeconds?: number;
  /**
   * How long before the Lambda deadline the invocation gives up, ms: it rolls back, refuses the
   * handler's further statements and fails. It must leave time for the ROLLBACK. Default 500. A
   * context without `getRemainingTimeInMillis` (not Lambda) counts from 60 s.
   */
  deadlineMarginMs?: number;
  /** Validates `detail.data` (a zod schema, e.g. from `defineEvent`); a failure fails the invocation. */
  schema?: z.ZodType<T>;
}

/** What the middleware adds to the Lambda context. */
export interface InboxContext<T = Record<string, unknown>> extends Context {
  inbox: {
    /**
     * The transaction the event is recorded in; the handler's writes go through it. Once the
     * invocation is over (deadline, lost connection, or the handler already returned), every
     * statement sent through it is refused with {@link InboxAbortedError}.
     */
    tx: Tx;
    metadata: EnvelopeMetadata;
    /** The payload, validated when a schema was given. */
    data: T;
  };
}

/** Why the handler did not run: the response of a skipped invocation. */
export interface InboxSkip {
  inbox: 'duplicate' | 'stale' | 'parked';
  eventId: string;
}

/** An event arrived ahead of a missing one (`wait-for-gap`); thrown so that Lambda retries it. */
export class InboxGapError extends OutboxError {
  override name = 'InboxGapError';
}

/** The EventBridge event did not carry the outbox envelope. */
export class InboxEnvelopeError extends OutboxError {
  override name = 'InboxEnvelopeError';
}

/** An option of {@link inbox} is invalid; `field` names it, e.g. `gapWaitSeconds`. */
export class InboxOptionsError extends OutboxError {
  override name = 'InboxOptionsError';
  readonly field: string;
  constructor(field: string, message: string) {
    super(`${field}: ${message}`);
    this.field = field;
  }
}

type Event = EventBridgeEvent<string, unknown>;
const INVOCATION = Symbol('inboxInvocation');

function readEnvelope(event: Event): { metadata: EnvelopeMetadata; data: unknown } {
  const detail = event?.detail as { metadata?: EnvelopeMetadata; data?: unknown } | undefined;
  const m = detail?.metadata;
  if (
    !m ||
    typeof m.eventId !== 'string' ||
    typeof m.aggregateType !== 'string' ||
    typeof m.aggregateId !== 'string' ||
    typeof m.sequence !== 'number'
  ) {
    throw new InboxEnvelopeError(
      'detail.metadata: expected { eventId, aggregateType, aggregateId, sequence } from the outbox envelope',
    );
  }
  return { metadata: m, data: detail?.data };
}

interface Settings {
  order: InboxOrder;
  gapWaitSeconds: number;
  retryWindowSeconds: number;
  deadlineMarginMs: number;
}

function settingsOf<T>(options: InboxOptions<T>): Settings {
  const number = (field: keyof InboxOptions<T>, value: unknown, fallback: number, min: number) => {
    const n = value ?? fallback;
    if (typeof n !== 'number' || !Number.isFinite(n) || n < min) {
      throw new InboxOptionsError(field, `expected a finite number ≥ ${min}, got ${String(value)}`);
    }
    return n;
  };
  if (typeof options.consumer !== 'string' || options.consumer.length === 0) {
    throw new InboxOptionsError('consumer', 'expected a non-empty string naming this consumer');
  }
  if (!(options.sql instanceof ConnectionPool) && typeof options.sql?.begin !== 'function') {
    throw new InboxOptionsError('sql', 'expected a porsager `postgres` pool');
  }
  const order = options.order ?? 'none';
  if (!['none', 'ignore-stale', 'wait-for-gap'].includes(order)) {
    throw new InboxOptionsError('order', `expected none, ignore-stale or wait-for-gap, got ${String(order)}`);
  }
  if (options.onGapTimeout !== undefined && !['process', 'park'].includes(options.onGapTimeout)) {
    throw new InboxOptionsError(
      'onGapTimeout',
      `expected process or park, got ${String(options.onGapTimeout)}`,
    );
  }
  const retryWindowSeconds = number(
    'retryWindowSeconds',
    options.retryWindowSeconds,
    LAMBDA_ASYNC_RETRY_WINDOW_SECONDS,
    0,
  );
  const gapWaitSeconds = number('gapWaitSeconds', options.gapWaitSeconds, 120, 0);
  if (order === 'wait-for-gap' && gapWaitSeconds > 0 && gapWaitSeconds >= retryWindowSeconds) {
    throw new InboxOptionsError(
      'gapWaitSeconds',
      `${gapWaitSeconds} s does not fit the retry window (retryWindowSeconds ${retryWindowSeconds} s): the last retry would come before the wait ends, and the event would go to the on-failure destination without being applied`,
    );
  }
  const deadlineMarginMs = number('deadlineMarginMs', options.deadlineMarginMs, 500, 0);
  return { order, gapWaitSeconds, retryWindowSeconds, deadlineMarginMs };
}

/**
 * The inbox middleware.
 * @throws {InboxOptionsError} at once, when an option is invalid (it names the option)
 * @throws {InboxGapError} (wait-for-gap) to make Lambda retry the event later
 * @throws {InboxEnvelopeError} when the event is not an outbox envelope
 * @throws {InboxAbortedError} when the deadline or a lost connection ended the transaction
 * @throws {InboxCommitError} when the transaction did not commit, e.g. a statement failed in it
 *   although the handler caught the error
 * @throws database errors, never swallowed: the invocation fails and nothing is recorded
 */
export function inbox<T = Record<string, unknown>>(
  options: InboxOptions<T>,
): MiddlewareObj<Event, unknown, Error, InboxContext<T>> {
  const { order, gapWaitSeconds, deadlineMarginMs } = settingsOf(options);
  const slot = (request: object) => request as Record<symbol, InvocationTransaction | undefined>;
  const pool = options.sql instanceof ConnectionPool ? options.sql : undefined;
  /** The pool of this invocation, and the generation to replace if its connection is lost. */
  const used = new WeakMap<object, number>();
  /** After an invocation that lost its connection, the next one starts on a fresh pool. */
  const recover = (request: object, error: unknown) => {
    const invocation = slot(request)[INVOCATION];
    const generation = used.get(request);
    if (pool && generation !== undefined && (invocation?.lost || isConnectionFailure(error)))
      pool.replace(generation);
  };
  return {
    before: async (request) => {
      const deadline = lambdaDeadline(request.context);
      if (deadline - deadlineMarginMs <= Date.now()) {
        throw new InboxAbortedError(
          'deadline',
          `less than deadlineMarginMs (${deadlineMarginMs} ms) was left when the invocation started; nothing was run`,
        );
      }
      const { metadata, data: raw } = readEnvelope(request.event);
      const data = options.schema ? options.schema.parse(raw) : (raw as T);
      const key = options.key ? options.key({ metadata, data }) : metadata.eventId;
      const skip = (why: InboxSkip['inbox']): InboxSkip => ({ inbox: why, eventId: metadata.eventId });
      const invocation = new InvocationTransaction(deadline, deadlineMarginMs);
      slot(request)[INVOCATION] = invocation;
      if (pool) used.set(request, pool.generation);
      const sql = pool ? pool.sql : (options.sql as Sql);

      if (order === 'wait-for-gap') {
        // Remembered outside the transaction: a gap fails the invocation, which rolls it back.
        await invocation.bounded(sql`
          insert into inbox_gap (consumer, message_key) values (${options.consumer}, ${key})
          on conflict do nothing`);
      }

      const skipped = await invocation.open(sql, async (tx): Promise<InboxSkip | undefined> => {
        // A concurrent delivery of the same event waits here for the first one's transaction, and
        // then sees its row: only one of them runs the handler.
        const inserted = await tx`
          insert into inbox_message (consumer, message_key, aggregate_type, aggregate_id, sequence)
          values (${options.consumer}, ${key}, ${metadata.aggregateType}, ${metadata.aggregateId}, ${metadata.sequence})
          on conflict do nothing
          returning 1`;
        if (inserted.length === 0) {
          if (order === 'wait-for-gap')
            await tx`delete from inbox_gap where consumer = ${options.consumer} and message_key = ${key}`;
          return skip('duplicate');
        }
        if (order === 'none') return undefined;

        const [last] = await tx<{ last_sequence: string }[]>`
          insert into inbox_aggregate (consumer, aggregate_type, aggregate_id, last_sequence)
          values (${options.consumer}, ${metadata.aggregateType}, ${metadata.aggregateId}, 0)
          on conflict (consumer, aggregate_type, aggregate_id) do update set updated_at = inbox_aggregate.updated_at
          returning last_sequence`;
        const lastSequence = Number(last?.last_sequence ?? 0);
        if (metadata.sequence <= lastSequence) {
          await tx`update inbox_message set outcome = 'skipped' where consumer = ${options.consumer} and message_key = ${key}`;
          return skip('stale');
        }
        if (order === 'wait-for-gap' && metadata.sequence > lastSequence + 1) {
          const [seen] = await tx<{ waited: number }[]>`
            select extract(epoch from now() - first_seen_at)::float8 as waited
            from inbox_gap where consumer = ${options.consumer} and message_key = ${key}`;
          const waited = seen?.waited ?? 0;
          if (waited < gapWaitSeconds) {
            throw new InboxGapError(
              `event ${metadata.eventId} is #${metadata.sequence} of ${metadata.aggregateType}/${metadata.aggregateId} but #${lastSequence + 1} was not applied yet (waited ${waited.toFixed(0)} of ${gapWaitSeconds} s); failing so that Lambda retries it`,
            );
          }
          if (options.onGapTimeout === 'park') {
            await tx`update inbox_message set outcome = 'parked' where consumer = ${options.consumer} and message_key = ${key}`;
            await tx`delete from inbox_gap where consumer = ${options.consumer} and message_key = ${key}`;
            return skip('parked');
          }
        }
        await tx`
          update inbox_aggregate set last_sequence = ${metadata.sequence}, updated_at = now()
          where consumer = ${options.consumer} and aggregate_type = ${metadata.aggregateType} and aggregate_id = ${metadata.aggregateId}`;
        if (order === 'wait-for-gap')
          await tx`delete from inbox_gap where consumer = ${options.consumer} and message_key = ${key}`;
        return undefined;
      });
      if (skipped) return skipped;
      request.context.inbox = { tx: invocation.handle as Tx, metadata, data };
      return undefined;
    },
    after: async (request) => {
      try {
        await slot(request)[INVOCATION]?.commit();
      } catch (error) {
        recover(request, error);
        throw error;
      }
    },
    onError: async (request) => {
      try {
        await slot(request)[INVOCATION]?.abandon(request.error);
      } finally {
        recover(request, request.error);
      }
    },
  };
}
