/**
 * The event envelope on the bus and its size as EventBridge counts it.
 *
 * Detail = `{ metadata: { eventId, aggregateType, aggregateId, sequence, typeSequence, occurredAt,
 * outboxId, traceparent }, data }`.
 * `eventId` is ours and stable across re-publication; EventBridge's own event `id` changes on
 * every PutEvents call and must not be used to deduplicate.
 */
import { OutboxError } from './errors.ts';

/** Metadata carried in every event's Detail, as a consumer reads it after `JSON.parse`. */
export interface EnvelopeMetadata {
  /** uuid, the same on every re-publication: the consumer's idempotency key. */
  eventId: string;
  aggregateType: string;
  aggregateId: string;
  /**
   * 1, 2, 3… per aggregate, in commit order. The Detail carries it as a JSON number literal with
   * the exact int8 value; `JSON.parse` (as Lambda's Node.js runtime applies to every event) reads it
   * exactly up to 2^53 − 1 (9,007,199,254,740,991) and rounds it beyond.
   */
  sequence: number;
  /**
   * 1, 2, 3… per aggregate *and event type* (DetailType), in commit order: what a consumer that
   * receives only some of an aggregate's event types checks for gaps (the inbox's `types` option).
   * Absent on events enqueued before migration 010.
   */
  typeSequence?: number;
  /** ISO-8601 UTC time the event was enqueued. */
  occurredAt: string;
  /**
   * The outbox that numbered the event (a uuid drawn when migration 031 ran, `outbox.outbox_identity`):
   * `sequence` and `typeSequence` count per outbox, so two outboxes publishing one aggregate type
   * and id make two chains, and the inbox keeps them apart (docs/inbox-order.md#two-outboxes-one-consumer).
   * Absent on events relayed by releases before it, and on an entry it would take past the size limit.
   */
  outboxId?: string;
  /**
   * The producer's trace context, a W3C `traceparent` (`00-<32 hex>-<16 hex>-<2 hex>`), when the
   * event was enqueued with one and the entry has room for it (docs/observe.md#the-trace). Absent
   * otherwise, and on events relayed by releases before it.
   */
  traceparent?: string;
}

/** The metadata as the relay writes it: the sequences as the decimal text the database returned. */
export interface DetailMetadata extends Omit<EnvelopeMetadata, 'sequence' | 'typeSequence'> {
  /** The int8 sequence in decimal, written into the Detail as a number literal, digit for digit. */
  sequence: string;
  /** The int8 typeSequence in decimal, likewise; left out of the Detail when undefined. */
  typeSequence?: string;
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

/**
 * The fields of a PutEvents entry that count toward its size: the AWS SDK's PutEventsRequestEntry
 * has them all. Declared here rather than imported so that the producer's and the consumer's types
 * do not need the EventBridge client installed.
 */
export interface SizedEntry {
  Source?: string | undefined;
  DetailType?: string | undefined;
  Detail?: string | undefined;
  Resources?: string[] | undefined;
  Time?: Date | undefined;
}

/** Entries per PutEvents request, as EventBridge allows. */
export const MAX_ENTRIES_PER_REQUEST = 10;

/**
 * Size of one PutEvents entry in bytes, as EventBridge counts it: the UTF-8 bytes of Source,
 * DetailType, Detail and each Resources item, plus 14 when Time is set. (The TraceHeader and
 * EventBusName are not counted.) Source: the EventBridge user guide, "Calculating PutEvents event
 * entry size".
 */
export function entrySize(entry: SizedEntry): number {
  let size = entry.Time ? TIME_FIELD_BYTES : 0;
  size += Buffer.byteLength(entry.Source ?? '', 'utf8');
  size += Buffer.byteLength(entry.DetailType ?? '', 'utf8');
  size += Buffer.byteLength(entry.Detail ?? '', 'utf8');
  for (const resource of entry.Resources ?? []) size += Buffer.byteLength(resource, 'utf8');
  return size;
}

const INT8_TEXT = /^-?\d{1,19}$/;

/**
 * Serialises the Detail of an event: `{"metadata":{…},"data":<payload>}`, the members in the order
 * of {@link EnvelopeMetadata}. The sequence and the payload are spliced in as text, so no number in
 * them passes through a JavaScript double.
 * @param payloadJson the payload's compact JSON text, as stored (see `compactJsonb`)
 * @throws {OutboxError} when `metadata.sequence` (or `typeSequence`) is not an int8's decimal text
 */
export function detailJson(metadata: DetailMetadata, payloadJson: string): string {
  if (!INT8_TEXT.test(metadata.sequence)) {
    throw new OutboxError(`sequence: ${JSON.stringify(metadata.sequence)} is not an int8 in decimal`);
  }
  const { typeSequence } = metadata;
  if (typeSequence !== undefined && !INT8_TEXT.test(typeSequence)) {
    throw new OutboxError(`typeSequence: ${JSON.stringify(typeSequence)} is not an int8 in decimal`);
  }
  const ofType = typeSequence === undefined ? '' : `,"typeSequence":${typeSequence}`;
  const outbox = metadata.outboxId === undefined ? '' : `,"outboxId":${JSON.stringify(metadata.outboxId)}`;
  const traced =
    metadata.traceparent === undefined ? '' : `,"traceparent":${JSON.stringify(metadata.traceparent)}`;
  return `{"metadata":{"eventId":${JSON.stringify(metadata.eventId)},"aggregateType":${JSON.stringify(metadata.aggregateType)},"aggregateId":${JSON.stringify(metadata.aggregateId)},"sequence":${metadata.sequence}${ofType},"occurredAt":${JSON.stringify(metadata.occurredAt)}${outbox}${traced}},"data":${payloadJson}}`;
}
