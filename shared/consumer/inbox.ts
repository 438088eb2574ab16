/**
 * The inbox: a middy middleware for Lambdas that are targets of EventBridge rules, so that each
 * event is applied once per consumer although the outbox (and EventBridge) deliver at least once.
 *
 * For each invocation it opens a transaction on a reserved connection, records the event for this
 * consumer (`inbox_message`, keyed by consumer and `metadata.eventId` or a business key), and hands
 * the handler that transaction as `context.inbox.tx`: the handler's writes commit together with the
 * record. A duplicate is acknowledged without running the handler. An error rolls everything back
 * and fails the invocation, so EventBridge retries it (and the target's DLQ catches what never
 * succeeds).
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
import type postgres from 'postgres';
import type { z } from 'zod';
import type { EnvelopeMetadata, Sql } from '../platform/index.ts';
import { OutboxError } from '../platform/index.ts';

/** How an order-aware consumer treats an event that is not the next one of its aggregate. */
export type InboxOrder = 'none' | 'ignore-stale' | 'wait-for-gap';

/** Options of {@link inbox}. */
export interface InboxOptions<T> {
  /** A pool; one connection is reserved per invocation. */
  sql: Sql;
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
   *   {@link InboxGapError}, so EventBridge redelivers it later, once the missing one has likely
   *   been applied; after `gapWaitSeconds` it is processed anyway (the gap is accepted), or parked
   *   (acknowledged as skipped, kept in `inbox_message` with outcome `parked`) when
   *   `onGapTimeout: 'park'`. An aggregate never seen before expects sequence 1.
   */
  order?: InboxOrder;
  /** wait-for-gap: how long to keep failing an event ahead of a gap, seconds. Default 300. */
  gapWaitSeconds?: number;
  /** wait-for-gap: what to do after the wait. Default `process`. */
  onGapTimeout?: 'process' | 'park';
  /** Validates `detail.data` (a zod schema, e.g. from `defineEvent`); a failure fails the invocation. */
  schema?: z.ZodType<T>;
}

/** What the middleware adds to the Lambda context. */
export interface InboxContext<T = Record<string, unknown>> extends Context {
  inbox: {
    /** The transaction the event is recorded in; the handler's writes go through it. */
    tx: postgres.ReservedSql;
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

/** An event arrived ahead of a missing one (`wait-for-gap`); thrown so EventBridge retries it. */
export class InboxGapError extends OutboxError {
  override name = 'InboxGapError';
}

/** The EventBridge event did not carry the outbox envelope. */
export class InboxEnvelopeError extends OutboxError {
  override name = 'InboxEnvelopeError';
}

type Event = EventBridgeEvent<string, unknown>;
const RESERVED = Symbol('inboxReserved');

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

/**
 * The inbox middleware.
 * @throws {InboxGapError} (wait-for-gap) to make EventBridge redeliver later
 * @throws {InboxEnvelopeError} when the event is not an outbox envelope
 * @throws database errors, never swallowed: the invocation fails and nothing is recorded
 */
export function inbox<T = Record<string, unknown>>(
  options: InboxOptions<T>,
): MiddlewareObj<Event, unknown, Error, InboxContext<T>> {
  const order = options.order ?? 'none';
  const gapWaitSeconds = options.gapWaitSeconds ?? 300;
  return {
    before: async (request) => {
      const { metadata, data: raw } = readEnvelope(request.event);
      const data = options.schema ? options.schema.parse(raw) : (raw as T);
      const key = options.key ? options.key({ metadata, data }) : metadata.eventId;
      const skip = (why: InboxSkip['inbox']): InboxSkip => ({ inbox: why, eventId: metadata.eventId });

      if (order === 'wait-for-gap') {
        // Remembered outside the transaction: a gap fails the invocation, which rolls it back.
        await options.sql`
          insert into inbox_gap (consumer, message_key) values (${options.consumer}, ${key})
          on conflict do nothing`;
      }

      const tx = await options.sql.reserve();
      (request as unknown as Record<symbol, unknown>)[RESERVED] = tx;
      await tx`begin`;
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
        await finish(request, 'commit');
        return skip('duplicate');
      }

      if (order !== 'none') {
        const [last] = await tx<{ last_sequence: string }[]>`
          insert into inbox_aggregate (consumer, aggregate_type, aggregate_id, last_sequence)
          values (${options.consumer}, ${metadata.aggregateType}, ${metadata.aggregateId}, 0)
          on conflict (consumer, aggregate_type, aggregate_id) do update set updated_at = inbox_aggregate.updated_at
          returning last_sequence`;
        const lastSequence = Number(last?.last_sequence ?? 0);
        if (metadata.sequence <= lastSequence) {
          await tx`update inbox_message set outcome = 'skipped' where consumer = ${options.consumer} and message_key = ${key}`;
          await finish(request, 'commit');
          return skip('stale');
        }
        if (order === 'wait-for-gap' && metadata.sequence > lastSequence + 1) {
          const [seen] = await tx<{ waited: number }[]>`
            select extract(epoch from now() - first_seen_at)::float8 as waited
            from inbox_gap where consumer = ${options.consumer} and message_key = ${key}`;
          const waited = seen?.waited ?? 0;
          if (waited < gapWaitSeconds) {
            await finish(request, 'rollback');
            throw new InboxGapError(
              `event ${metadata.eventId} is #${metadata.sequence} of ${metadata.aggregateType}/${metadata.aggregateId} but #${lastSequence + 1} was not applied yet (waited ${waited.toFixed(0)} of ${gapWaitSeconds} s); failing so EventBridge redelivers it`,
            );
          }
          if (options.onGapTimeout === 'park') {
            await tx`update inbox_message set outcome = 'parked' where consumer = ${options.consumer} and message_key = ${key}`;
            await tx`delete from inbox_gap where consumer = ${options.consumer} and message_key = ${key}`;
            await finish(request, 'commit');
            return skip('parked');
          }
        }
        await tx`
          update inbox_aggregate set last_sequence = ${metadata.sequence}, updated_at = now()
          where consumer = ${options.consumer} and aggregate_type = ${metadata.aggregateType} and aggregate_id = ${metadata.aggregateId}`;
        if (order === 'wait-for-gap')
          await tx`delete from inbox_gap where consumer = ${options.consumer} and message_key = ${key}`;
      }
      request.context.inbox = { tx, metadata, data };
      return undefined;
    },
    after: async (request) => {
      await finish(request, 'commit');
    },
    onError: async (request) => {
      await finish(request, 'rollback');
    },
  };
}

/** Ends the invocation's transaction (once) and returns its connection to the pool. */
async function finish(request: object, how: 'commit' | 'rollback'): Promise<void> {
  const slot = request as Record<symbol, postgres.ReservedSql | undefined>;
  const tx = slot[RESERVED];
  if (!tx) return;
  slot[RESERVED] = undefined;
  try {
    await (how === 'commit' ? tx`commit` : tx`rollback`);
  } finally {
    tx.release();
  }
}
