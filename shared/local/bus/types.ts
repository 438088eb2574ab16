/**
 * What the local bus and its parts share (bus.ts, bus/entries.ts, bus/eventsv2.ts): the faults it
 * injects, the events it accepted, its counters. A leaf: it imports nothing, so the parts import it
 * instead of the bus that imports them.
 */
/** Fault injection; every rate is a probability in [0, 1], drawn per request or per entry. */
export interface Faults {
  /** Delay before answering, ms: a fixed value or a [min, max] range. */
  latencyMs?: number | [number, number];
  /** Chance of a latency spike of `spikeMs` on a request. */
  spikeRate?: number;
  spikeMs?: number;
  /** Per request: refuse the whole request with HTTP 400 ThrottlingException. */
  throttleRate?: number;
  /** Per request: answer HTTP 500 InternalException. */
  serverErrorRate?: number;
  /** Per entry: fail it with `entryFailureCode` (default InternalFailure) inside an HTTP 200. */
  entryFailureRate?: number;
  entryFailureCode?: string;
  /** Per request: accept and record every entry, then drop the connection without answering. */
  lostResponseRate?: number;
  /** Per entry: fail entries whose Detail contains this text with `poisonCode` (default InvalidArgument). */
  poisonMarker?: string;
  poisonCode?: string;
}

/** An event the bus accepted. */
export interface AcceptedEvent {
  /** EventBridge's own id: new on every PutEvents call, so not usable for deduplication. */
  id: string;
  eventBusName: string | undefined;
  source: string;
  detailType: string;
  /** `Detail` parsed (with JSON.parse: numbers beyond a double's precision are rounded here). */
  detail: Record<string, unknown>;
  /** `Detail` exactly as the bus received it. */
  detailText: string;
  time: string | undefined;
  traceHeader: string | undefined;
  /** Wall-clock time the bus accepted it, ms since the epoch. */
  receivedAt: number;
  /** The request it came in; entries of one request share it. */
  requestId: string;
  /** True when the response to this request was deliberately lost (the sender cannot know it landed). */
  responseLost: boolean;
  /** Custom Event Bus only (then `eventBusName` is the bus ARN): `SystemMetadata.EventGroupId`. */
  eventGroupId?: string;
  /** Custom Event Bus only: `SystemMetadata.DeduplicationId`. */
  deduplicationId?: string;
  /** Custom Event Bus only: the bus's sequence number for the event (decimal text, 1, 2, 3… per bus). */
  sequenceNumber?: string;
}

/** Counters of what the bus saw. */
export interface BusStats {
  requests: number;
  entries: number;
  accepted: number;
  throttled: number;
  serverErrors: number;
  entryFailures: number;
  lostResponses: number;
  rejected: number;
  /** Custom Event Bus entries answered DEDUPLICATED (not delivered again). */
  deduplicated: number;
  /** Largest number of entries in one request, and largest request size in bytes. */
  maxEntriesPerRequest: number;
  maxRequestBytes: number;
}
