/**
 * The local bus's Custom Event Bus (EventsV2, API 2025-05-15): PutEvents over Smithy RPC v2 CBOR
 * (`POST /service/AWSEventsV2/operation/PutEvents`, header `smithy-protocol: rpc-v2-cbor`, CBOR
 * bodies encoded and decoded with `@smithy/core/cbor`), answered the way the service answers:
 *
 * - limits: 1–100 entries (else InvalidInputException, HTTP 400); total entry size ≤ the bus's
 *   `maxRequestBytes`, counted as for the classic bus (the EventsV2 entry size rule is not
 *   published in the model: an assumption); `EventBusArn` required; per entry Source, DetailType
 *   and a JSON-object Detail (InvalidArgument / MalformedDetail, as the classic bus), Source not
 *   `aws.` (NotAuthorizedForSourceException), DetailType ≤ 128 characters, `DeduplicationId` ≤ 128
 *   characters and `EventGroupId` ≤ {@link MAX_EVENT_GROUP_ID_LENGTH} (InvalidArgument; the
 *   per-entry codes are the classic bus's: the model types ErrorCode as a plain string);
 * - deduplication: an entry whose `DeduplicationId` the bus accepted within the last
 *   {@link DEDUP_WINDOW_MS} is answered `SuccessCode: DEDUPLICATED` with the first one's EventId and
 *   SequenceNumber, and is not delivered again. The scope is the account (of the bus ARN), the
 *   `EventGroupId` and the `DeduplicationId`, as the API reference states it: the same id in two
 *   groups is two events, and the same id and group on two buses of one account is one;
 * - order: accepted entries get the bus's next `SequenceNumber` (per bus ARN) in request order, and
 *   are recorded in that order: a FIFO subscriber of a group reads the recorded events of its
 *   `EventGroupId` in that order ({@link fifoDeliveries});
 * - faults, drawn as for the classic bus: throttling (429 ThrottlingException), server error (500
 *   InternalException), per-entry failure, poison entries, lost responses (recorded, then the
 *   connection dropped).
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { cbor } from '@smithy/core/cbor';
import { entrySize } from '../../platform/envelope.ts';
import { checkEntry } from './entries.ts';
import type { AcceptedEvent, BusStats, Faults } from './types.ts';

/** Entries per PutEvents request on a Custom Event Bus. */
export const EVENTSV2_MAX_ENTRIES = 100;
/** Characters of a `DeduplicationId` (the API reference). */
export const MAX_DEDUPLICATION_ID_LENGTH = 128;
/** Characters of an `EventGroupId`: 1–128 (the API reference); the relay hashes longer keys. */
export const MAX_EVENT_GROUP_ID_LENGTH = 128;
/** How long a DeduplicationId is remembered, ms: 5 minutes. */
export const DEDUP_WINDOW_MS = 5 * 60_000;

const NAMESPACE = 'com.amazonaws.eventbridgev2';
const PUT_EVENTS_PATH = '/service/AWSEventsV2/operation/PutEvents';

/** What the EventsV2 handler shares with the local bus. */
export interface EventsV2Context {
  faults(): Faults;
  chance(rate: number | undefined): boolean;
  delay(): Promise<void>;
  stats(): BusStats;
  record(event: AcceptedEvent): void;
  emitReceived(entries: { eventBusName: string | undefined; detail: unknown }[]): void;
  maxRequestBytes: number;
  /** Milliseconds now (the dedup window's clock). */
  now(): number;
}

/** Deduplication and sequence state of the Custom Event Buses of one local bus. */
export class EventsV2State {
  readonly #seen = new Map<string, { at: number; eventId: string; sequenceNumber: string }>();
  readonly #sequences = new Map<string, bigint>();

  nextSequence(busArn: string): string {
    const next = (this.#sequences.get(busArn) ?? 0n) + 1n;
    this.#sequences.set(busArn, next);
    return next.toString();
  }

  /** The accepted entry with this id in this account and group within the window, if any. */
  duplicate(busArn: string, groupId: string | undefined, dedupId: string, now: number) {
    const key = dedupKey(busArn, groupId, dedupId);
    const seen = this.#seen.get(key);
    if (seen && now - seen.at < DEDUP_WINDOW_MS) return seen;
    if (seen) this.#seen.delete(key);
    return undefined;
  }

  remember(
    busArn: string,
    groupId: string | undefined,
    dedupId: string,
    at: number,
    eventId: string,
    sequenceNumber: string,
  ): void {
    this.#seen.set(dedupKey(busArn, groupId, dedupId), { at, eventId, sequenceNumber });
  }

  reset(): void {
    this.#seen.clear();
    this.#sequences.clear();
  }
}

/** Deduplication's scope: the bus ARN's account, the EventGroupId (none is its own scope) and the id. */
function dedupKey(busArn: string, groupId: string | undefined, dedupId: string): string {
  const account = busArn.split(':')[4] ?? '';
  return [account, groupId === undefined ? '\u0001' : `g${groupId}`, dedupId].join('\u0000');
}

/** Whether a request is for the Custom Event Bus's API (RPC v2 CBOR) rather than the classic one. */
export function isEventsV2Request(req: IncomingMessage): boolean {
  return (req.url ?? '').startsWith('/service/') || req.headers['smithy-protocol'] !== undefined;
}

/**
 * The events a FIFO subscriber of `eventGroupId` would receive, in order: the accepted events of that
 * group on that bus, in sequence-number order.
 */
export function fifoDeliveries(events: readonly AcceptedEvent[], eventGroupId: string, eventBusArn?: string) {
  return events
    .filter(
      (e) => e.eventGroupId === eventGroupId && (eventBusArn === undefined || e.eventBusName === eventBusArn),
    )
    .sort((a, b) => compareSequence(a.sequenceNumber ?? '0', b.sequenceNumber ?? '0'));
}

function compareSequence(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}

/** Answers one request of the Custom Event Bus API. */
export async function handleEventsV2(
  req: IncomingMessage,
  res: ServerResponse,
  body: Buffer,
  ctx: EventsV2Context,
  state: EventsV2State,
): Promise<void> {
  const stats = ctx.stats();
  if (req.method !== 'POST' || req.url !== PUT_EVENTS_PATH) {
    return sendError(res, 404, 'UnknownOperationException', `Unsupported operation ${String(req.url)}`);
  }
  if (String(req.headers['smithy-protocol']).toLowerCase() !== 'rpc-v2-cbor') {
    return sendError(res, 400, 'InvalidInputException', 'missing header smithy-protocol: rpc-v2-cbor');
  }
  stats.requests++;
  let input: { EventBusArn?: unknown; Entries?: Record<string, unknown>[] };
  try {
    input = cbor.deserialize(new Uint8Array(body)) as typeof input;
  } catch {
    stats.rejected++;
    return sendError(res, 400, 'SerializationException', 'Request body is not valid CBOR');
  }
  const busArn = input.EventBusArn;
  if (typeof busArn !== 'string' || !/^arn:aws[\w-]*:events:[\w-]+:\d{12}:event-busv2\/.+/.test(busArn)) {
    stats.rejected++;
    return sendError(
      res,
      400,
      'InvalidInputException',
      `EventBusArn is not a Custom Event Bus ARN: ${String(busArn)}`,
    );
  }
  const entries = input.Entries;
  if (!Array.isArray(entries) || entries.length < 1 || entries.length > EVENTSV2_MAX_ENTRIES) {
    stats.rejected++;
    return sendError(
      res,
      400,
      'InvalidInputException',
      `Entries must hold between 1 and ${EVENTSV2_MAX_ENTRIES} entries`,
    );
  }
  const size = entries.reduce(
    (sum, e) => sum + entrySize({ ...(e as object), Time: e.Time === undefined ? undefined : new Date() }),
    0,
  );
  stats.entries += entries.length;
  stats.maxEntriesPerRequest = Math.max(stats.maxEntriesPerRequest, entries.length);
  stats.maxRequestBytes = Math.max(stats.maxRequestBytes, size);
  if (size > ctx.maxRequestBytes) {
    stats.rejected++;
    return sendError(
      res,
      400,
      'InvalidInputException',
      'Total size of the entries in the request is over the limit.',
    );
  }
  ctx.emitReceived(entries.map((e) => ({ eventBusName: busArn, detail: parseDetail(e.Detail) })));
  await ctx.delay();
  const faults = ctx.faults();
  if (ctx.chance(faults.throttleRate)) {
    stats.throttled++;
    return sendError(res, 429, 'ThrottlingException', 'Rate exceeded');
  }
  if (ctx.chance(faults.serverErrorRate)) {
    stats.serverErrors++;
    return sendError(res, 500, 'InternalException', 'An internal error occurred');
  }

  const requestId = randomUUID();
  const lose = ctx.chance(faults.lostResponseRate);
  const now = ctx.now();
  const results = entries.map((entry) => {
    const refusal = checkV2Entry(entry, faults);
    if (refusal) {
      stats.entryFailures++;
      return { ErrorCode: refusal[0], ErrorMessage: refusal[1] };
    }
    if (ctx.chance(faults.entryFailureRate)) {
      stats.entryFailures++;
      return { ErrorCode: faults.entryFailureCode ?? 'InternalFailure', ErrorMessage: 'Injected failure' };
    }
    const meta = (entry.SystemMetadata ?? {}) as { EventGroupId?: string; DeduplicationId?: string };
    if (meta.DeduplicationId !== undefined) {
      const seen = state.duplicate(busArn, meta.EventGroupId, meta.DeduplicationId, now);
      if (seen) {
        stats.deduplicated++;
        return { EventId: seen.eventId, SequenceNumber: seen.sequenceNumber, SuccessCode: 'DEDUPLICATED' };
      }
    }
    const sequenceNumber = state.nextSequence(busArn);
    const accepted: AcceptedEvent = {
      id: randomUUID(),
      eventBusName: busArn,
      source: entry.Source as string,
      detailType: entry.DetailType as string,
      detail: JSON.parse(entry.Detail as string),
      detailText: entry.Detail as string,
      time: timeOf(entry.Time),
      traceHeader: undefined,
      receivedAt: Date.now(),
      requestId,
      responseLost: lose,
      eventGroupId: meta.EventGroupId,
      deduplicationId: meta.DeduplicationId,
      sequenceNumber,
    };
    if (meta.DeduplicationId !== undefined) {
      state.remember(busArn, meta.EventGroupId, meta.DeduplicationId, now, accepted.id, sequenceNumber);
    }
    ctx.record(accepted);
    return { EventId: accepted.id, SequenceNumber: sequenceNumber, SuccessCode: 'PUBLISHED' };
  });
  if (lose) {
    stats.lostResponses++;
    req.socket.destroy();
    return;
  }
  const failed = results.filter((r) => 'ErrorCode' in r).length;
  send(res, 200, { FailedEntryCount: failed, Entries: results });
}

/**
 * The per-entry checks: SystemMetadata's ids within their lengths, then those of the classic bus
 * (entries.ts). Returns [ErrorCode, ErrorMessage] for a refused entry.
 */
function checkV2Entry(entry: Record<string, unknown>, faults: Faults): [string, string] | undefined {
  const meta = (entry.SystemMetadata ?? {}) as { EventGroupId?: unknown; DeduplicationId?: unknown };
  for (const [field, max] of [
    ['DeduplicationId', MAX_DEDUPLICATION_ID_LENGTH],
    ['EventGroupId', MAX_EVENT_GROUP_ID_LENGTH],
  ] as const) {
    const id = meta[field];
    if (id !== undefined && (typeof id !== 'string' || id.length === 0 || id.length > max)) {
      return ['InvalidArgument', `SystemMetadata.${field} must be 1 to ${max} characters.`];
    }
  }
  return checkEntry(entry, faults);
}

function parseDetail(detail: unknown): unknown {
  try {
    return JSON.parse(String(detail));
  } catch {
    return undefined;
  }
}

/** A CBOR timestamp arrives as tag 1 (epoch seconds), decoded by the codec as `{ tag, value }`. */
function timeOf(time: unknown): string | undefined {
  if (time === undefined || time === null) return undefined;
  const seconds =
    typeof time === 'object' && 'value' in time ? Number((time as { value: unknown }).value) : Number(time);
  return Number.isFinite(seconds) ? new Date(seconds * 1000).toISOString() : undefined;
}

function send(res: ServerResponse, status: number, body: Record<string, unknown>): void {
  const bytes = cbor.serialize(body);
  res.writeHead(status, {
    'content-type': 'application/cbor',
    'smithy-protocol': 'rpc-v2-cbor',
    'content-length': bytes.byteLength,
    'x-amzn-requestid': randomUUID(),
  });
  res.end(bytes);
}

/** An RPC v2 CBOR error: the shape id in `__type`, the message in `message`. */
function sendError(res: ServerResponse, status: number, type: string, message: string): void {
  send(res, status, { __type: `${NAMESPACE}#${type}`, message });
}
