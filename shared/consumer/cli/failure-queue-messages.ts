/**
 * What a consumer's failure queues hold, read back into the EventBridge events to replay. Three
 * shapes reach them (the OutboxConsumer construct's `failedEventsQueue` and `deadLetterQueue`):
 *
 * - **an invocation record** — the direct topology's on-failure destination: Lambda sends, after
 *   the last retry of an asynchronous invocation, `{ version, timestamp, requestContext: {
 *   requestId, functionArn, condition: 'RetriesExhausted' | 'EventAgeExceeded',
 *   approximateInvokeCount }, requestPayload, responseContext, responsePayload: { errorType,
 *   errorMessage } }`, the event being `requestPayload` ("Capturing records of Lambda asynchronous
 *   invocations", AWS Lambda Developer Guide);
 * - **the event itself, with the delivery error in message attributes** — a rule target's
 *   dead-letter queue: EventBridge could not deliver it (`ERROR_CODE`, `ERROR_MESSAGE`,
 *   `RETRY_ATTEMPTS`, `RULE_ARN`, `TARGET_ARN`; "Using dead-letter queues to process undelivered
 *   events in EventBridge", Amazon EventBridge User Guide);
 * - **the event itself** — the queue topology's dead-letter queue: a message the function failed
 *   on `maxReceiveCount` times, moved by SQS as the rule delivered it (the error is in the
 *   function's logs and in `outbox inbox failed list`).
 *
 * Pure: no I/O here (failure-queue-client.ts reads and deletes the messages).
 */
import type { EventBridgeEvent } from 'aws-lambda';

/** One message of a failure queue, as SQS returned it. */
export interface QueueMessage {
  queueUrl: string;
  messageId: string;
  receiptHandle: string;
  body: string;
  /** String message attributes (`ERROR_CODE`…), by name. */
  attributes: Readonly<Record<string, string>>;
  /** `ApproximateReceiveCount` (this receive included). */
  receiveCount: number;
  /** `SentTimestamp`: when the message entered this queue (a dead-letter queue keeps the source queue's). */
  sentAt: Date | undefined;
}

/** Where a message came from, by its shape (see the module's comment). */
export type QueuedKind = 'invocation-record' | 'undelivered' | 'event' | 'unreadable';

/** A failure queue's message, read. */
export interface QueuedEvent {
  message: QueueMessage;
  kind: QueuedKind;
  /** The EventBridge event to invoke the function with; undefined when `unreadable`. */
  event: EventBridgeEvent<string, unknown> | undefined;
  /** `detail.metadata.eventId`, else `eventbridge:` and EventBridge's `id`, else `sqs:` and the message id. */
  eventId: string;
  /** The DetailType ('' when unreadable). */
  type: string;
  /** `aggregateType/aggregateId` from the envelope's metadata ('' when it has none). */
  aggregate: string;
  /**
   * `metadata.sequence`, exact: a JSON number, or a decimal string (how a sequence past 2^53
   * travels, as the inbox accepts it); undefined when missing or not a whole number.
   */
  sequence: bigint | undefined;
  /** Why it failed, as far as the message says: the handler's error, or EventBridge's delivery error. */
  error: string;
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null;

function isEventBridgeEvent(v: unknown): v is EventBridgeEvent<string, unknown> {
  return isObject(v) && typeof v['detail-type'] === 'string' && typeof v.source === 'string' && 'detail' in v;
}

/**
 * Reads one message: its kind, the event in it and what the envelope says of it. Never throws:
 * a body that is not JSON or holds no EventBridge event is `unreadable`, with the reason in `error`.
 */
export function readQueueMessage(message: QueueMessage): QueuedEvent {
  const unreadable = (why: string): QueuedEvent => ({
    message,
    kind: 'unreadable',
    event: undefined,
    eventId: `sqs:${message.messageId}`,
    type: '',
    aggregate: '',
    sequence: undefined,
    error: why,
  });
  let body: unknown;
  try {
    body = JSON.parse(message.body);
  } catch {
    return unreadable('the message body is not JSON');
  }
  if (isObject(body) && isObject(body.requestContext) && 'responseContext' in body) {
    if (!isEventBridgeEvent(body.requestPayload)) {
      return unreadable(
        'an invocation record without an EventBridge event in requestPayload (a payload too large for the record is left out of it)',
      );
    }
    const response = isObject(body.responsePayload) ? body.responsePayload : {};
    const condition = String(body.requestContext.condition ?? 'failed');
    const attempts = body.requestContext.approximateInvokeCount;
    const cause = [response.errorType, response.errorMessage].filter((p) => typeof p === 'string').join(': ');
    return described(
      message,
      'invocation-record',
      body.requestPayload,
      `${condition}${typeof attempts === 'number' ? ` after ${attempts} attempt(s)` : ''}${cause ? ` — ${cause}` : ''}`,
    );
  }
  if (!isEventBridgeEvent(body)) return unreadable('the message body is not an EventBridge event');
  const code = message.attributes.ERROR_CODE;
  if (code !== undefined) {
    const detail = message.attributes.ERROR_MESSAGE;
    return described(message, 'undelivered', body, `not delivered: ${code}${detail ? ` — ${detail}` : ''}`);
  }
  return described(
    message,
    'event',
    body,
    `received ${message.receiveCount} time(s) without success (the errors are in the function's logs and outbox inbox failed list)`,
  );
}

function described(
  message: QueueMessage,
  kind: QueuedKind,
  event: EventBridgeEvent<string, unknown>,
  error: string,
): QueuedEvent {
  const metadata = isObject(event.detail) && isObject(event.detail.metadata) ? event.detail.metadata : {};
  const eventId =
    typeof metadata.eventId === 'string' && metadata.eventId !== ''
      ? metadata.eventId
      : typeof event.id === 'string'
        ? `eventbridge:${event.id}`
        : `sqs:${message.messageId}`;
  const aggregate =
    typeof metadata.aggregateType === 'string' && metadata.aggregateId !== undefined
      ? `${metadata.aggregateType}/${String(metadata.aggregateId)}`
      : '';
  const raw = metadata.sequence;
  const sequence =
    typeof raw === 'number' && Number.isSafeInteger(raw)
      ? BigInt(raw)
      : typeof raw === 'string' && /^-?[0-9]{1,19}$/.test(raw.trim())
        ? BigInt(raw.trim())
        : undefined;
  return {
    message,
    kind,
    event,
    eventId,
    type: event['detail-type'],
    aggregate,
    sequence,
    error,
  };
}

/** An event to replay and every message that holds it (the same event can sit in two queues, or twice in one). */
export interface ReplayItem {
  first: QueuedEvent;
  copies: QueuedEvent[];
}

/**
 * The readable events in the order to replay them: one item per event id (its copies deleted with
 * it), aggregate by aggregate (aggregates in the order their first message came), each by
 * `sequence`; events without an aggregate or sequence last, in queue order. The order of a chain
 * is what the inbox needs: an event replayed ahead of a lower one of its aggregate would wait for
 * it (wait-for-gap) or be applied ahead of it.
 */
export function replayOrder(events: readonly QueuedEvent[]): ReplayItem[] {
  const byId = new Map<string, ReplayItem>();
  for (const e of events) {
    if (e.kind === 'unreadable') continue;
    const item = byId.get(e.eventId);
    if (item) item.copies.push(e);
    else byId.set(e.eventId, { first: e, copies: [] });
  }
  const items = [...byId.values()];
  const aggregateRank = new Map<string, number>();
  for (const { first } of items) {
    if (first.aggregate !== '' && !aggregateRank.has(first.aggregate)) {
      aggregateRank.set(first.aggregate, aggregateRank.size);
    }
  }
  const rank = (e: QueuedEvent) =>
    e.aggregate === '' || e.sequence === undefined
      ? Number.POSITIVE_INFINITY
      : (aggregateRank.get(e.aggregate) ?? 0);
  // Array.prototype.sort is stable: what ties keeps its queue order.
  return items.sort((a, b) => {
    const ra = rank(a.first);
    const rb = rank(b.first);
    if (ra !== rb) return ra - rb;
    if (ra === Number.POSITIVE_INFINITY) return 0;
    const sa = a.first.sequence as bigint;
    const sb = b.first.sequence as bigint;
    return sa < sb ? -1 : sa > sb ? 1 : 0;
  });
}

/** The queue's name, the last part of its URL, for messages meant for a person. */
export const queueName = (queueUrl: string): string => queueUrl.split('/').filter(Boolean).at(-1) ?? queueUrl;
