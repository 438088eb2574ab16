/**
 * The classic event bus (the default): claimed events as PutEvents entries of
 * `@aws-sdk/client-eventbridge`, packed into requests by count (10) and bytes
 * (`maxRequestBytes`), sent, and answered entry by entry (publisher.ts).
 */
import {
  EventBridgeClient,
  type EventBridgeClientConfig,
  PutEventsCommand,
  type PutEventsRequestEntry,
} from '@aws-sdk/client-eventbridge';
import {
  type DetailMetadata,
  detailJson,
  entrySize,
  idsOfTraceHeader,
  MAX_ENTRIES_PER_REQUEST,
  type RelaySettings,
  traceparentOf,
} from '../../platform/index.ts';
import type { ClaimedEvent } from '../types.ts';
import {
  addNoRetryAfterTimeout,
  answerOrAbort,
  checkEventBridgeClient,
  type EntryOutcome,
  entryOutcome,
  PUT_EVENTS_TIMEOUTS,
  type Publisher,
  type PublishRequest,
  refusedAsInvalid,
  requestFailure,
} from './publisher.ts';

/**
 * A client for the relay's calls to the classic bus: 3 attempts, the per-attempt timeouts of
 * {@link PUT_EVENTS_TIMEOUTS}, no retry inside the call after an attempt without an answer.
 */
export function createEventBridgeClient(config: EventBridgeClientConfig = {}): EventBridgeClient {
  const client = new EventBridgeClient({
    maxAttempts: 3,
    requestHandler: { ...PUT_EVENTS_TIMEOUTS, throwOnRequestTimeout: true },
    ...config,
  });
  client.middlewareStack.remove(USER_AGENT_MIDDLEWARE);
  addNoRetryAfterTimeout(client.middlewareStack);
  return client;
}

/** The name `@aws-sdk/middleware-user-agent` registers its middleware under (in the build step). */
export const USER_AGENT_MIDDLEWARE = 'getUserAgentMiddleware';

/**
 * The PutEvents entry for an event: the envelope described in docs/producing.md#the-event-on-the-bus.
 * The outbox's id goes into the metadata as `outboxId` when the event has one and the entry stays
 * within `maxEntryBytes` (enqueue's size check does not count its 50 bytes; without the limit it
 * always goes); then, with `traced` and `maxEntryBytes`, the producer's trace context
 * as `traceparent` when its trace header maps to one and the entry still fits.
 */
export function toEntry(
  event: ClaimedEvent,
  eventBusName: string,
  maxEntryBytes?: number,
  traced = true,
): PutEventsRequestEntry {
  const metadata: DetailMetadata = {
    eventId: event.eventId,
    aggregateType: event.aggregateType,
    aggregateId: event.aggregateId,
    sequence: event.sequence,
    ...(event.typeSequence === undefined ? {} : { typeSequence: event.typeSequence }),
    occurredAt: event.createdAt.toISOString(),
  };
  const entry: PutEventsRequestEntry = {
    EventBusName: eventBusName,
    Source: event.source,
    DetailType: event.type,
    Time: event.createdAt,
    Detail: detailJson(metadata, event.payloadJson),
  };
  const fits = (detail: string) =>
    maxEntryBytes === undefined || entrySize({ ...entry, Detail: detail }) <= maxEntryBytes;
  if (event.outboxId !== undefined) {
    const named = detailJson({ ...metadata, outboxId: event.outboxId }, event.payloadJson);
    if (fits(named)) {
      entry.Detail = named;
      metadata.outboxId = event.outboxId;
    }
  }
  const traceparent =
    maxEntryBytes === undefined || !traced ? undefined : traceparentOf(idsOfTraceHeader(event.traceHeader));
  if (traceparent !== undefined) {
    const withTrace = detailJson({ ...metadata, traceparent }, event.payloadJson);
    if (fits(withTrace)) entry.Detail = withTrace;
  }
  if (event.traceHeader) entry.TraceHeader = event.traceHeader;
  return entry;
}

/**
 * Packs items into requests of at most 10 entries and `maxRequestBytes` bytes (EventBridge's
 * count). An item larger than the limit on its own gets a request of its own (and EventBridge's
 * refusal, which dead-letters it) rather than blocking the rest.
 */
export function packRequests<T extends { entry: PutEventsRequestEntry }>(
  items: readonly T[],
  maxRequestBytes: number,
): T[][] {
  const requests: T[][] = [];
  let current: T[] = [];
  let bytes = 0;
  for (const item of items) {
    const size = entrySize(item.entry);
    if (
      current.length > 0 &&
      (current.length === MAX_ENTRIES_PER_REQUEST || bytes + size > maxRequestBytes)
    ) {
      requests.push(current);
      current = [];
      bytes = 0;
    }
    current.push(item);
    bytes += size;
  }
  if (current.length > 0) requests.push(current);
  return requests;
}

/**
 * Sends one PutEvents request and returns one outcome per entry, in request order. Never throws.
 * Request-level failures (network, timeout or abort, 5xx, throttling after the SDK's own retries,
 * a refused request) become a retryable outcome for every entry; a request refused as invalid is
 * split and its entries sent one by one, so one bad entry cannot hold back the others.
 * @param signal aborts the call, SDK retries and their backoff included (the entries then fail
 *   as back-pressure: `AbortError`)
 * @param answerTimeoutMs how long each attempt waits for the answer, ms (default: the client's);
 *   an attempt without one fails the call (`PutEventsTimeoutError`, see {@link isNoAnswer})
 */
export async function putEntries(
  client: EventBridgeClient,
  entries: PutEventsRequestEntry[],
  signal?: AbortSignal,
  answerTimeoutMs?: number,
): Promise<EntryOutcome[]> {
  const command = new PutEventsCommand({ Entries: entries });
  const reported = answerOrAbort(command);
  try {
    const out = await client.send(command, {
      abortSignal: signal,
      ...(answerTimeoutMs === undefined ? {} : { requestTimeout: answerTimeoutMs }),
    });
    const results = out.Entries ?? [];
    return entries.map((_, i) => entryOutcome(results[i]));
  } catch (error) {
    if (refusedAsInvalid(error, 'ValidationException') && entries.length > 1 && !signal?.aborted) {
      const singles = await Promise.all(entries.map((e) => putEntries(client, [e], signal, answerTimeoutMs)));
      return singles.flat();
    }
    const outcome = requestFailure(reported(error));
    return entries.map(() => ({ ...outcome }));
  }
}

interface ClassicRequest extends PublishRequest {
  readonly entries: PutEventsRequestEntry[];
}

/** The classic event bus's {@link Publisher}: {@link toEntry}, {@link packRequests}, {@link putEntries}. */
export function eventBridgePublisher(client: EventBridgeClient, settings: RelaySettings): Publisher {
  return {
    kind: 'event-bus',
    pack(events) {
      const items = events.map((event) => ({
        event,
        entry: toEntry(event, settings.eventBusName, settings.maxRequestBytes),
      }));
      return packRequests(items, settings.maxRequestBytes).map(
        (request): ClassicRequest => ({
          events: request.map((i) => i.event),
          entries: request.map((i) => i.entry),
        }),
      );
    },
    put: (request, signal, answerTimeoutMs) =>
      putEntries(client, (request as ClassicRequest).entries, signal, answerTimeoutMs),
    check: () => checkEventBridgeClient(client),
  };
}

/** Entries per PutEvents request on a Custom Event Bus (the API reference). */
