/**
 * `sqsBatch(handler)`: runs an inbox handler, which takes one EventBridge event per call, over a
 * batch of SQS messages, for a consumer whose rule delivers into an SQS queue that a Lambda event
 * source mapping reads (the OutboxConsumer construct's `topology: 'queue'`).
 *
 * Each message's body is the EventBridge event the rule matched (an SQS rule target sends the whole
 * event as the body unless an input transformer says otherwise). The messages run one after the
 * other, each in its own inbox transaction; a message whose handler failed is reported in
 * `batchItemFailures`, so only it becomes visible again for a retry (the event source mapping
 * must have `ReportBatchItemFailures`; "Handling errors for an SQS event source in Lambda", AWS
 * Lambda Developer Guide). Throwing from the handler as a whole would retry the whole batch, so the
 * wrapper never throws for one message.
 */
import type { Context, EventBridgeEvent, SQSBatchResponse, SQSEvent, SQSRecord } from 'aws-lambda';

/** A handler of one EventBridge event, such as `inbox(options, fn)` returns. */
export type EventBridgeHandler<R> = (
  event: EventBridgeEvent<string, unknown>,
  context: Context,
  wrapper?: { signal?: AbortSignal },
) => Promise<R>;

/** What {@link sqsBatch} calls when a message fails; by default nothing (the inbox logs and traces its own failures). */
export type SqsBatchFailureListener = (record: SQSRecord, error: unknown) => void;

/**
 * Wraps an EventBridge-event handler for an SQS event source with partial batch responses.
 *
 * - An SQS event (`Records`): every message's body is parsed as an EventBridge event and given to
 *   `handler` in turn, lowest `detail.metadata.sequence` first, so that a chain's events in one
 *   batch come in their order (an event ahead of a gap under `wait-for-gap` would otherwise wait
 *   for one queued behind it). A body that is not an EventBridge event, or a handler that throws,
 *   puts the message's id in `batchItemFailures`; the others are acknowledged.
 * - Anything else is taken for one EventBridge event and passed to `handler` as it is, so that
 *   the function can still be invoked with a single event (`outbox inbox parked replay
 *   --function-name`, or a replay by hand).
 *
 * The Lambda deadline is shared: each message's inbox reads the time left when it starts, and one
 * that starts too late fails with `InboxAbortedError` and is retried like any failure.
 *
 * Under middy, the third argument middy gives its handler (`{ signal }`, the AbortSignal its
 * `timeoutEarlyInMillis` aborts) is passed to `handler` for every message, so the inbox writes each
 * message's trace before its transaction begins and rolls back at once on the abort (issue 45,
 * item 3). A `timeoutEarlyResponse` answers for the whole batch: return `{ batchItemFailures }`
 * naming every message, or the event source mapping deletes them all as processed.
 */
export function sqsBatch<R>(
  handler: EventBridgeHandler<R>,
  onFailure: SqsBatchFailureListener = () => {},
): (
  event: SQSEvent | EventBridgeEvent<string, unknown>,
  context: Context,
  wrapper?: { signal?: AbortSignal },
) => Promise<SQSBatchResponse | R> {
  return async (event, context, wrapper) => {
    if (!isSqsEvent(event)) return handler(event, context, wrapper);
    const failures: SQSBatchResponse['batchItemFailures'] = [];
    const parsed: {
      record: SQSRecord;
      event: EventBridgeEvent<string, unknown>;
      sequence: bigint | undefined;
    }[] = [];
    for (const record of event.Records) {
      try {
        const body = JSON.parse(record.body) as unknown;
        if (!isEventBridgeEvent(body)) throw new TypeError('the message body is not an EventBridge event');
        parsed.push({ record, event: body, sequence: sequenceOf(body) });
      } catch (error) {
        onFailure(record, error);
        failures.push({ itemIdentifier: record.messageId });
      }
    }
    // Array.prototype.sort is stable: events without a sequence keep their queue order.
    parsed.sort((a, b) =>
      a.sequence === b.sequence
        ? 0
        : a.sequence === undefined
          ? 1
          : b.sequence === undefined
            ? -1
            : a.sequence < b.sequence
              ? -1
              : 1,
    );
    // An SQS FIFO queue (a Custom Event Bus subscriber's queue topology): once a message of a group
    // failed, the later messages of that group are reported failed without running, so that they
    // come back after it, in order ("Handling errors for an SQS event source": for FIFO queues,
    // return the failed message and every later one of its group).
    const stopped = new Set<string>();
    for (const { record, event: one } of parsed) {
      const group = record.attributes?.MessageGroupId;
      if (group !== undefined && stopped.has(group)) {
        failures.push({ itemIdentifier: record.messageId });
        continue;
      }
      try {
        await handler(one, context, wrapper);
      } catch (error) {
        onFailure(record, error);
        failures.push({ itemIdentifier: record.messageId });
        if (group !== undefined) stopped.add(group);
      }
    }
    return { batchItemFailures: failures };
  };
}

function isSqsEvent(event: unknown): event is SQSEvent {
  return (
    typeof event === 'object' &&
    event !== null &&
    Array.isArray((event as SQSEvent).Records) &&
    (event as SQSEvent).Records.every((r) => r?.eventSource === 'aws:sqs')
  );
}

function isEventBridgeEvent(body: unknown): body is EventBridgeEvent<string, unknown> {
  if (typeof body !== 'object' || body === null) return false;
  const e = body as Record<string, unknown>;
  return typeof e['detail-type'] === 'string' && typeof e.source === 'string' && 'detail' in e;
}

/**
 * The event's per-aggregate sequence, for ordering a batch, exactly: past 2^53 the envelope carries
 * it as a decimal string, which a double would round (2^53 + 1 and 2^53 would tie). Undefined for an
 * event without a whole-number sequence; those sort last.
 */
function sequenceOf(event: EventBridgeEvent<string, unknown>): bigint | undefined {
  const sequence = (event.detail as { metadata?: { sequence?: unknown } } | null)?.metadata?.sequence;
  if (typeof sequence === 'number') return Number.isSafeInteger(sequence) ? BigInt(sequence) : undefined;
  if (typeof sequence === 'string' && /^-?\d{1,30}$/.test(sequence.trim())) return BigInt(sequence.trim());
  return undefined;
}
