/**
 * The Custom Event Bus (EventsV2, `OUTBOX_EVENT_BUS_ARN`): claimed events as its PutEvents entries
 * (the classic envelope plus `SystemMetadata`: the aggregate as `EventGroupId`, the event id as
 * `DeduplicationId`), packed ≤ 100 per request and `maxRequestBytes`, sent with the client of
 * custom-event-bus-client.ts, and answered entry by entry (publisher.ts).
 */
import { createHash } from 'node:crypto';
import { entrySize, type RelaySettings } from '../../platform/index.ts';
import type { ClaimedEvent } from '../types.ts';
import { toEntry } from './classic-bus.ts';
import {
  EVENTSV2_SUCCESS_CODES,
  EventsV2Client,
  type EventsV2ClientConfig,
  EventsV2PutEventsCommand,
  type EventsV2PutEventsRequestEntry,
} from './custom-event-bus-client.ts';
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

/** Entries per PutEvents request on a Custom Event Bus (the API reference). */
export const EVENTSV2_MAX_ENTRIES_PER_REQUEST = 100;

/**
 * Characters of an `EventGroupId` the relay sends. The model gives no length for it (the Rust
 * crate and the generated TypeScript schemas carry none); 128, the limit of `DeduplicationId` and
 * of an SQS FIFO group id, is our choice: longer aggregate keys are hashed (see
 * {@link eventGroupIdOf}).
 */
export const MAX_EVENT_GROUP_ID_LENGTH = 128;

/**
 * The `EventGroupId` of an event: its aggregate, `aggregateType/aggregateId`. A key longer than
 * {@link MAX_EVENT_GROUP_ID_LENGTH} becomes `sha256:` and the hex SHA-256 of the key (71
 * characters): stable across relays and re-sends, so the group, and the order within it, is the
 * same every time. Two aggregates may share a group (`a/b`+`c` and `a`+`b/c`, or a hash collision):
 * that only orders them together, it never reorders either.
 */
export function eventGroupIdOf(event: Pick<ClaimedEvent, 'aggregateType' | 'aggregateId'>): string {
  const key = `${event.aggregateType}/${event.aggregateId}`;
  if (key.length <= MAX_EVENT_GROUP_ID_LENGTH) return key;
  return `sha256:${createHash('sha256').update(key, 'utf8').digest('hex')}`;
}

/**
 * The Custom Event Bus entry of an event: the classic envelope (without TraceHeader, which the API
 * has no member for, nor a `traceparent` yet; with `outboxId` when it fits in `maxEntryBytes`) plus
 * its system metadata.
 */
export function toEventsV2Entry(event: ClaimedEvent, maxEntryBytes?: number): EventsV2PutEventsRequestEntry {
  const classic = toEntry(event, '', maxEntryBytes, false);
  return {
    Source: classic.Source as string,
    DetailType: classic.DetailType as string,
    Detail: classic.Detail as string,
    Time: event.createdAt,
    // The event id is a uuid (36 characters), within DeduplicationId's 128.
    SystemMetadata: { EventGroupId: eventGroupIdOf(event), DeduplicationId: event.eventId },
  };
}

interface EventsV2Request extends PublishRequest {
  readonly entries: EventsV2PutEventsRequestEntry[];
}

/**
 * A client for the relay's calls to a Custom Event Bus: 3 attempts, the classic client's
 * per-attempt timeouts and the same rule that an attempt without an answer is not retried inside
 * the call (publisher.ts, {@link PUT_EVENTS_TIMEOUTS}).
 */
export function createEventsV2Client(config: EventsV2ClientConfig = {}): EventsV2Client {
  const client = new EventsV2Client({
    maxAttempts: 3,
    requestHandler: { ...PUT_EVENTS_TIMEOUTS, throwOnRequestTimeout: true },
    ...config,
  });
  addNoRetryAfterTimeout(client.middlewareStack as never);
  return client;
}

/** The Custom Event Bus (`settings.eventBusArn`); see the module's comment. */
export function eventsV2Publisher(client: EventsV2Client, settings: RelaySettings): Publisher {
  const eventBusArn = settings.eventBusArn;
  if (!eventBusArn) throw new TypeError('eventsV2Publisher: settings.eventBusArn is not set');
  const put = async (
    entries: EventsV2PutEventsRequestEntry[],
    signal?: AbortSignal,
    answerTimeoutMs?: number,
  ): Promise<EntryOutcome[]> => {
    const command = new EventsV2PutEventsCommand({ EventBusArn: eventBusArn, Entries: entries });
    // A smithy Command underneath: it has the middleware stack its declared type leaves out.
    const reported = answerOrAbort(command as unknown as Parameters<typeof answerOrAbort>[0]);
    try {
      const out = await client.send(command, {
        abortSignal: signal,
        ...(answerTimeoutMs === undefined ? {} : { requestTimeout: answerTimeoutMs }),
      });
      const results = out.Entries ?? [];
      return entries.map((_, i) => {
        const r = results[i];
        // PUBLISHED, or DEDUPLICATED: an entry with this event id was accepted within the last 5
        // minutes (a re-send after a lost answer) and is not delivered again. Both are published.
        const accepted =
          r?.SuccessCode === EVENTSV2_SUCCESS_CODES.published ||
          r?.SuccessCode === EVENTSV2_SUCCESS_CODES.deduplicated;
        return accepted && !r?.ErrorCode ? { ok: true } : entryOutcome(r);
      });
    } catch (error) {
      // A request refused as invalid (InvalidInputException, the API's validation error) is split,
      // so that one bad entry cannot hold back the others, as on the classic bus.
      if (refusedAsInvalid(error, 'InvalidInputException') && entries.length > 1 && !signal?.aborted) {
        const singles = await Promise.all(entries.map((e) => put([e], signal, answerTimeoutMs)));
        return singles.flat();
      }
      const outcome = requestFailure(reported(error));
      return entries.map(() => ({ ...outcome }));
    }
  };
  return {
    kind: 'custom-event-bus',
    pack(events) {
      const requests: EventsV2Request[] = [];
      let current: { events: ClaimedEvent[]; entries: EventsV2PutEventsRequestEntry[] } = {
        events: [],
        entries: [],
      };
      let bytes = 0;
      for (const event of events) {
        const entry = toEventsV2Entry(event, settings.maxRequestBytes);
        // Counted as the classic bus counts an entry (Source, DetailType, Detail, 14 bytes for
        // Time): the EventsV2 reference gives no rule of its own (an assumption, in the docs).
        const size = entrySize(entry);
        if (
          current.events.length > 0 &&
          (current.events.length === EVENTSV2_MAX_ENTRIES_PER_REQUEST ||
            bytes + size > settings.maxRequestBytes)
        ) {
          requests.push(current);
          current = { events: [], entries: [] };
          bytes = 0;
        }
        current.events.push(event);
        current.entries.push(entry);
        bytes += size;
      }
      if (current.events.length > 0) requests.push(current);
      return requests;
    },
    put: (request, signal, answerTimeoutMs) =>
      put((request as EventsV2Request).entries, signal, answerTimeoutMs),
    check: () => checkEventBridgeClient(client),
  };
}
