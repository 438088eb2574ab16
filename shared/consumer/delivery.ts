/**
 * Reads the EventBridge event a rule hands its Lambda target: the outbox envelope in `detail`,
 * checked field by field, and the payload validated against the consumer's schema. Every refusal
 * is a typed error naming the field (errors.ts).
 *
 * A Custom Event Bus subscriber hands the same event (its default transformer, `RAW`: the
 * published data, for PutEvents the EventBridge event), or, with `Transformer: WITH_METADATA`,
 * `{ Data: <that event>, Metadata?, SystemMetadata: { "aws:DeliveryType": "LIVE" | "REPLAY", … } }`
 * (User Guide, "Transforming events with JSONata"): {@link unwrapDelivery} takes the event out of
 * it and says whether the bus marked it a replay.
 */
import type { EventBridgeEvent } from 'aws-lambda';
import type { EnvelopeMetadata } from '../platform/envelope.ts';
import type { PayloadSchema } from '../producer/typed-events.ts';
import { InboxEnvelopeError, InboxPayloadError } from './errors.ts';

/** The event as the inbox hands it to `key`: who sent it, what it is, and its envelope. */
export interface InboxEvent<T = Record<string, unknown>> {
  /** The DetailType, e.g. `OrderPlaced`. */
  type: string;
  /** The event's Source, e.g. `shop.orders`. */
  source: string;
  metadata: EnvelopeMetadata;
  /** `detail.data`, validated when the consumer gave a `schema`. */
  data: T;
}

/** An event read by {@link readDelivery}, with its positions as exact integers. */
export interface Delivery<T> extends InboxEvent<T> {
  sequence: bigint;
  /** Absent on events enqueued before migration 010. */
  typeSequence: bigint | undefined;
  /**
   * The outbox that numbered it (`metadata.outboxId`, lower case), absent on events relayed by a
   * release before migration 031: its chain is then the aggregate's row kept before.
   */
  outboxId: string | undefined;
}

/**
 * What a Custom Event Bus subscriber with `Transformer: WITH_METADATA` and `MaxBatchSize` 1 hands
 * its Lambda function: the event and what EventBridge assigned (every value a string).
 */
export interface WithMetadataDelivery {
  Data: EventBridgeEvent<string, unknown>;
  Metadata?: Record<string, string>;
  SystemMetadata: Record<string, string>;
}

/** How the event came: `deliveryType` as a Custom Event Bus subscriber marked it, if it did. */
export interface DeliveryOrigin {
  /** The EventBridge event: the one Lambda received, or a WITH_METADATA delivery's `Data`. */
  event: EventBridgeEvent<string, unknown>;
  /** `SystemMetadata."aws:DeliveryType"`; undefined for an event without it (a rule, a RAW subscriber). */
  deliveryType: 'LIVE' | 'REPLAY' | undefined;
  /** Set when the WITH_METADATA wrapper is malformed: the invocation fails with it, traced. */
  refusal?: InboxEnvelopeError;
}

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * Takes the EventBridge event out of a Custom Event Bus subscriber's WITH_METADATA delivery (an
 * object with `Data` and `SystemMetadata` and no `detail`), and reads its `aws:DeliveryType`; any
 * other event is returned as it is. Never throws: a malformed wrapper comes back with `refusal`.
 */
export function unwrapDelivery(raw: unknown): DeliveryOrigin {
  const event = raw as EventBridgeEvent<string, unknown>;
  if (!isObject(raw) || !('SystemMetadata' in raw) || 'detail' in raw)
    return { event, deliveryType: undefined };
  const system = raw.SystemMetadata;
  const data = raw.Data;
  if (!isObject(data)) {
    return {
      event,
      deliveryType: undefined,
      refusal: new InboxEnvelopeError(
        'Data',
        'a WITH_METADATA delivery without its event: expected the EventBridge event in `Data` (for PutEvents)',
      ),
    };
  }
  const unwrapped = data as unknown as EventBridgeEvent<string, unknown>;
  const type = isObject(system) ? system['aws:DeliveryType'] : undefined;
  if (type !== 'LIVE' && type !== 'REPLAY') {
    return {
      event: unwrapped,
      deliveryType: undefined,
      refusal: new InboxEnvelopeError(
        'SystemMetadata.aws:DeliveryType',
        `expected LIVE or REPLAY (EventBridge always sets it), got ${JSON.stringify(type)}`,
      ),
    };
  }
  return { event: unwrapped, deliveryType: type };
}

/**
 * The deliveries of one Lambda payload of a Custom Event Bus subscriber: the payload itself when it
 * is an object, or each element, in order, when it is an array (the .cn mirror and AWS's samples
 * say a subscriber hands "a JSON array … even when the batch holds one event"; the current page
 * says one object for MaxBatchSize 1: both shapes are taken).
 * @returns `undefined` for a payload that is not an array (read it as one event)
 * @throws {InboxEnvelopeError} (`event`) for an empty array
 */
export function deliveriesOf(raw: unknown): readonly unknown[] | undefined {
  if (!Array.isArray(raw)) return undefined;
  if (raw.length === 0) {
    throw new InboxEnvelopeError(
      'event',
      'an empty array: expected an EventBridge event, or an array of one or more (a Custom Event Bus batch)',
    );
  }
  return raw;
}

/** EventBridge's caps: Source 256 characters, DetailType 128 (PutEvents API reference). */
const MAX_SOURCE = 256;
const MAX_DETAIL_TYPE = 128;

/**
 * A position in a chain: a positive whole number. The outbox writes it as a JSON number; a
 * decimal string is accepted too, so that a sequence past 2^53 can travel without loss.
 */
function position(value: unknown, field: string, required: boolean): bigint | undefined {
  if (value === undefined || value === null) {
    if (required) throw new InboxEnvelopeError(field, 'is required (a whole number from 1)');
    return undefined;
  }
  let n: bigint | undefined;
  if (typeof value === 'number' && Number.isSafeInteger(value)) n = BigInt(value);
  else if (typeof value === 'string' && /^[0-9]{1,19}$/.test(value)) n = BigInt(value);
  if (n === undefined || n < 1n || n > 9_223_372_036_854_775_807n) {
    throw new InboxEnvelopeError(
      field,
      `expected a whole number from 1 (the outbox numbers each aggregate's events 1, 2, 3…), got ${JSON.stringify(value)}`,
    );
  }
  return n;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The outbox's id: a uuid when present (migration 031 draws one per outbox database). */
function outboxIdOf(value: unknown): string | undefined {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string' || !UUID.test(value)) {
    throw new InboxEnvelopeError(
      'detail.metadata.outboxId',
      `expected the outbox's id, a uuid (outbox.outbox_identity), got ${JSON.stringify(value)}`,
    );
  }
  return value.toLowerCase();
}

function text(value: unknown, field: string, max: number): string {
  if (typeof value !== 'string' || value.trim() === '')
    throw new InboxEnvelopeError(field, `expected a non-empty string, got ${JSON.stringify(value)}`);
  if (value.length > max) throw new InboxEnvelopeError(field, `longer than ${max} characters`);
  return value;
}

/**
 * Reads and checks the event.
 * @param types the DetailTypes the consumer declared it receives, if it did
 * @throws {InboxEnvelopeError} naming the field when the envelope is missing or malformed, or the
 *   DetailType is not among `types`
 * @throws {InboxPayloadError} naming the first field the schema refused
 */
export function readDelivery<T>(
  event: EventBridgeEvent<string, unknown>,
  options: { types?: readonly string[]; schema?: PayloadSchema<T> },
): Delivery<T> {
  const type = text(event?.['detail-type'], 'detail-type', MAX_DETAIL_TYPE);
  const source = text(event?.source, 'source', MAX_SOURCE);
  const detail = event.detail as { metadata?: Record<string, unknown>; data?: unknown } | undefined;
  const m = detail?.metadata;
  if (!m || typeof m !== 'object') {
    throw new InboxEnvelopeError(
      'detail.metadata',
      'missing: expected { eventId, aggregateType, aggregateId, sequence } from the outbox envelope',
    );
  }
  const eventId = text(m.eventId, 'detail.metadata.eventId', 512);
  const aggregateType = text(m.aggregateType, 'detail.metadata.aggregateType', 512);
  const aggregateId = text(m.aggregateId, 'detail.metadata.aggregateId', 512);
  const sequence = position(m.sequence, 'detail.metadata.sequence', true) as bigint;
  const typeSequence = position(m.typeSequence, 'detail.metadata.typeSequence', false);
  const outboxId = outboxIdOf(m.outboxId);
  if (typeSequence !== undefined && typeSequence > sequence) {
    throw new InboxEnvelopeError(
      'detail.metadata.typeSequence',
      `${typeSequence} is past the event's sequence ${sequence}: an event's rank among its type cannot exceed its rank in the aggregate`,
    );
  }
  if (options.types && !options.types.includes(type)) {
    throw new InboxEnvelopeError(
      'detail-type',
      `${type} is not among the types this consumer declared (${options.types.join(', ')}): add it to \`types\`, or narrow the rule that delivers it`,
    );
  }
  let data = detail?.data as T;
  if (options.schema) {
    const parsed = options.schema.safeParse(detail?.data);
    if (!parsed.success) {
      const issue = parsed.error.issues[0];
      const path = (issue?.path ?? [])
        .map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`))
        .join('');
      throw new InboxPayloadError(`detail.data${path}`, issue?.message ?? 'does not match the schema', {
        cause: parsed.error,
      });
    }
    data = parsed.data;
  }
  const metadata = { ...(m as unknown as EnvelopeMetadata), eventId, aggregateType, aggregateId };
  return { type, source, metadata, data, sequence, typeSequence, outboxId };
}
