/** The producer API's types: the event a producer hands over, the options, and the result. */

/** An event as the producer hands it over. */
export interface OutboxEvent {
  /** The event type, sent as EventBridge's DetailType. 1–128 characters. */
  type: string;
  /** The EventBridge Source, e.g. `shop.orders`. Must not start with `aws.`. Falls back to `options.defaultSource`. */
  source?: string;
  /** The kind of entity the event is about, e.g. `order`. */
  aggregateType: string;
  /** The entity's id. Events of one (aggregateType, aggregateId) are published in sequence order. */
  aggregateId: string | number;
  /**
   * A JSON object; becomes `data` in the Detail, every number as Postgres stores it (jsonb keeps
   * any number of digits). For a number a double cannot hold, give its digits: `JSON.rawJSON('1234567890123456789')`.
   */
  payload: Record<string, unknown>;
  /** When set, a second enqueue with the same key is a no-op (`duplicate: true`). 1–512 characters. */
  idempotencyKey?: string;
  /** The producer's X-Ray trace header (`Root=…;Parent=…;Sampled=…`), passed on as TraceHeader. */
  traceHeader?: string;
}

/** Options for {@link enqueue} and {@link enqueueMany}. */
export interface EnqueueOptions {
  /** Source for events that carry none. */
  defaultSource?: string;
  /** Largest entry accepted, bytes as EventBridge counts them. Default 1 MiB (the PutEvents request limit). */
  maxEntryBytes?: number;
}

/** What {@link enqueue} did with one event. */
export interface EnqueueResult {
  /** The event's stable id (uuid); for a duplicate, the id of the event already enqueued. */
  eventId: string;
  aggregateType: string;
  aggregateId: string;
  /**
   * Per-aggregate sequence (1, 2, 3…); for a duplicate, the earlier event's. The int8 in decimal,
   * exact at any size (compare two with `BigInt(a) < BigInt(b)`, not as strings).
   */
  sequence: string;
  /** True when an event with the same idempotency key already existed and nothing was written. */
  duplicate: boolean;
}
