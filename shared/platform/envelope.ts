/**
 * The event envelope on the bus and its size as EventBridge counts it.
 *
 * Detail = `{ metadata: { eventId, aggregateType, aggregateId, sequence, typeSequence, occurredAt }, data }`.
 * `eventId` is ours and stable across re-publication; EventBridge's own event `id` changes on
 * every PutEvents call and must not be used to deduplicate.
 */
import type { PutEventsRequestEntry } from '@aws-sdk/client-eventbridge';

/** Metadata carried in every event's Detail. */
export interface EnvelopeMetadata {
  /** uuid, the same on every re-publication: the consumer's idempotency key. */
  eventId: string;
  aggregateType: string;
  aggregateId: string;
  /** 1, 2, 3… per aggregate, in commit order. */
  sequence: number;
  /**
   * 1, 2, 3… per aggregate *and event type* (DetailType), in commit order: what a consumer that
   * receives only some of an aggregate's event types checks for gaps (the inbox's `types` option).
   * Absent on events enqueued before migration 010.
   */
  typeSequence?: number;
  /** ISO-8601 UTC time the event was enqueued. */
  occurredAt: string;
}

/** The Detail object: metadata plus the producer's payload. */
export interface Envelope<T = Record<string, unknown>> {
  metadata: EnvelopeMetadata;
  data: T;
}

/** Fixed bytes EventBridge adds for the `Time` field — see "Calculating PutEvents event entry size". */
export const TIME_FIELD_BYTES = 14;

/** EventBridge's cap on DetailType, characters. */
export const MAX_DETAIL_TYPE_LENGTH = 128;

/** Default PutEvents request limit, bytes (1 MiB). */
export const DEFAULT_MAX_REQUEST_BYTES = 1_048_576;

/** Entries per PutEvents request, as EventBridge allows. */
export const MAX_ENTRIES_PER_REQUEST = 10;

/**
 * Size of one PutEvents entry in bytes, as EventBridge counts it: the UTF-8 bytes of Source,
 * DetailType, Detail and each Resources item, plus 14 when Time is set. (The TraceHeader and
 * EventBusName are not counted.) Source: the EventBridge user guide, "Calculating PutEvents event
 * entry size".
 */
export function entrySize(entry: PutEventsRequestEntry): number {
  let size = entry.Time ? TIME_FIELD_BYTES : 0;
  size += Buffer.byteLength(entry.Source ?? '', 'utf8');
  size += Buffer.byteLength(entry.DetailType ?? '', 'utf8');
  size += Buffer.byteLength(entry.Detail ?? '', 'utf8');
  for (const resource of entry.Resources ?? []) size += Buffer.byteLength(resource, 'utf8');
  return size;
}

/** Serialises the Detail of an event. `payloadJson` is the payload's JSON text, as stored. */
export function detailJson(metadata: EnvelopeMetadata, payloadJson: string): string {
  return `{"metadata":${JSON.stringify(metadata)},"data":${payloadJson}}`;
}
