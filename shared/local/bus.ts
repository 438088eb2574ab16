/**
 * A local EventBridge endpoint for tests and `npm start`: it speaks the PutEvents wire protocol
 * (AWS JSON 1.1, `X-Amz-Target: AWSEvents.PutEvents`) so the real `@aws-sdk/client-eventbridge`
 * client talks to it over HTTP, enforces EventBridge's limits, records what it accepted, and can
 * inject the faults a real bus produces.
 *
 * Limits enforced (EventBridge API reference, PutEvents; user guide, "Calculating PutEvents event
 * entry size"): 1–10 entries per request; total entry size ≤ `maxRequestBytes` (1 MiB) else
 * ValidationException; Source, DetailType and Detail required (InvalidArgument); DetailType ≤ 128
 * characters (InvalidArgument); Source starting with `aws.` refused (NotAuthorizedForSourceException);
 * Detail must be a JSON object (MalformedDetail).
 *
 * The same server answers the Custom Event Bus's PutEvents (EventsV2, Smithy RPC v2 CBOR, routed by
 * its `/service/AWSEventsV2/operation/PutEvents` path and `smithy-protocol` header), with that
 * API's limits, its 5-minute deduplication and per-bus sequence numbers: see bus/eventsv2.ts.
 *
 * Control endpoints for other processes: `GET /_local/events` (accepted events as JSON),
 * `GET /_local/stats`, `PUT /_local/faults` (JSON {@link Faults}), `POST /_local/reset`.
 */
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DEFAULT_MAX_REQUEST_BYTES, entrySize, MAX_ENTRIES_PER_REQUEST } from '../platform/envelope.ts';
import { checkEntry } from './bus/entries.ts';
import { EventsV2State, handleEventsV2, isEventsV2Request } from './bus/eventsv2.ts';
import type { AcceptedEvent, BusStats, Faults } from './bus/types.ts';
import { seeded } from './seeded.ts';

export {
  DEDUP_WINDOW_MS,
  EVENTSV2_MAX_ENTRIES,
  fifoDeliveries,
  MAX_DEDUPLICATION_ID_LENGTH,
  MAX_EVENT_GROUP_ID_LENGTH,
} from './bus/eventsv2.ts';
export type { AcceptedEvent, BusStats, Faults } from './bus/types.ts';

/** Options of {@link startLocalBus}. */
export interface LocalBusOptions {
  port?: number;
  host?: string;
  /** Request size limit, bytes as EventBridge counts them. Default 1 MiB. */
  maxRequestBytes?: number;
  faults?: Faults;
  /** Seed for the fault dice, for repeatable runs. */
  seed?: number;
}

/** A running local bus. */
export interface LocalBus {
  /** `http://host:port`, for `AWS_ENDPOINT_URL_EVENTBRIDGE` or the client's `endpoint`. */
  url: string;
  port: number;
  /** Accepted events in arrival order. */
  readonly events: AcceptedEvent[];
  readonly stats: BusStats;
  /**
   * Emits `'accepted'` with each {@link AcceptedEvent}, and `'received'` with the entries
   * (`{ eventBusName, detail }`, Detail parsed) of every well-formed PutEvents request as it
   * arrives, before any fault is applied.
   */
  readonly emitter: EventEmitter;
  setFaults(faults: Faults): void;
  reset(): void;
  close(): Promise<void>;
}

function emptyStats(): BusStats {
  return {
    requests: 0,
    entries: 0,
    accepted: 0,
    throttled: 0,
    serverErrors: 0,
    entryFailures: 0,
    lostResponses: 0,
    rejected: 0,
    deduplicated: 0,
    maxEntriesPerRequest: 0,
    maxRequestBytes: 0,
  };
}

/** Starts a local bus on `host:port` (default 127.0.0.1 and a free port). */
export async function startLocalBus(options: LocalBusOptions = {}): Promise<LocalBus> {
  const maxRequestBytes = options.maxRequestBytes ?? DEFAULT_MAX_REQUEST_BYTES;
  const random = options.seed === undefined ? Math.random : seeded(options.seed);
  let faults: Faults = { ...options.faults };
  const events: AcceptedEvent[] = [];
  let stats = emptyStats();
  const emitter = new EventEmitter();
  emitter.setMaxListeners(0);
  const chance = (rate: number | undefined) => rate !== undefined && rate > 0 && random() < rate;

  const eventsV2 = new EventsV2State();
  const handle = async (req: IncomingMessage, res: ServerResponse, raw: Buffer) => {
    const url = req.url ?? '/';
    const body = raw.toString('utf8');
    if (url.startsWith('/_local/')) return control(req, res, url, body);
    if (isEventsV2Request(req)) {
      return handleEventsV2(
        req,
        res,
        raw,
        {
          faults: () => faults,
          chance,
          delay: () => delay(faults, random),
          stats: () => stats,
          record(accepted) {
            events.push(accepted);
            stats.accepted++;
            emitter.emit('accepted', accepted);
          },
          emitReceived: (entries) => emitter.emit('received', entries),
          maxRequestBytes,
          now: () => Date.now(),
        },
        eventsV2,
      );
    }

    const target = req.headers['x-amz-target'];
    if (req.method !== 'POST' || target !== 'AWSEvents.PutEvents') {
      return sendError(res, 400, 'UnknownOperationException', `Unsupported operation ${String(target)}`);
    }
    stats.requests++;
    let input: { Entries?: Record<string, unknown>[] };
    try {
      input = JSON.parse(body);
    } catch {
      stats.rejected++;
      return sendError(res, 400, 'SerializationException', 'Request body is not valid JSON');
    }
    const entries = input.Entries;
    if (!Array.isArray(entries) || entries.length < 1 || entries.length > MAX_ENTRIES_PER_REQUEST) {
      stats.rejected++;
      return sendError(
        res,
        400,
        'ValidationException',
        `1 validation error detected: Value at 'entries' failed to satisfy constraint: Member must have length less than or equal to ${MAX_ENTRIES_PER_REQUEST} and greater than or equal to 1`,
      );
    }
    const badBus = entries.find(
      (e) =>
        e.EventBusName !== undefined &&
        !/^(arn:aws[\w-]*:events:[\w-]+:\d{12}:event-bus\/)?[/.\-_A-Za-z0-9]{1,256}$/.test(
          String(e.EventBusName),
        ),
    );
    if (badBus) {
      stats.rejected++;
      return sendError(
        res,
        400,
        'ValidationException',
        `1 validation error detected: Value '${String(badBus.EventBusName)}' at 'entries.1.member.eventBusName' failed to satisfy constraint`,
      );
    }
    const size = entries.reduce(
      (sum, e) => sum + entrySize({ ...(e as object), Time: e.Time === undefined ? undefined : new Date() }),
      0,
    );
    stats.entries += entries.length;
    stats.maxEntriesPerRequest = Math.max(stats.maxEntriesPerRequest, entries.length);
    stats.maxRequestBytes = Math.max(stats.maxRequestBytes, size);
    if (size > maxRequestBytes) {
      stats.rejected++;
      return sendError(
        res,
        400,
        'ValidationException',
        'Total size of the entries in the request is over the limit.',
      );
    }

    // Every entry that reached the bus, whatever the faults do with it next (the model-based test
    // counts started publications from these).
    emitter.emit(
      'received',
      entries.map((e) => ({ eventBusName: e.EventBusName, detail: JSON.parse(String(e.Detail)) })),
    );
    await delay(faults, random);
    if (chance(faults.throttleRate)) {
      stats.throttled++;
      return sendError(res, 400, 'ThrottlingException', 'Rate exceeded');
    }
    if (chance(faults.serverErrorRate)) {
      stats.serverErrors++;
      return sendError(res, 500, 'InternalException', 'An internal error occurred');
    }

    const requestId = randomUUID();
    const lose = chance(faults.lostResponseRate);
    const results = entries.map((entry) => {
      const refusal = checkEntry(entry, faults);
      if (refusal) {
        stats.entryFailures++;
        return { ErrorCode: refusal[0], ErrorMessage: refusal[1] };
      }
      if (chance(faults.entryFailureRate)) {
        stats.entryFailures++;
        const code = faults.entryFailureCode ?? 'InternalFailure';
        return { ErrorCode: code, ErrorMessage: 'Injected failure' };
      }
      const accepted: AcceptedEvent = {
        id: randomUUID(),
        eventBusName: entry.EventBusName as string | undefined,
        source: entry.Source as string,
        detailType: entry.DetailType as string,
        detail: JSON.parse(entry.Detail as string),
        detailText: entry.Detail as string,
        time: typeof entry.Time === 'number' ? new Date(entry.Time * 1000).toISOString() : undefined,
        traceHeader: entry.TraceHeader as string | undefined,
        receivedAt: Date.now(),
        requestId,
        responseLost: lose,
      };
      events.push(accepted);
      stats.accepted++;
      emitter.emit('accepted', accepted);
      return { EventId: accepted.id };
    });
    if (lose) {
      stats.lostResponses++;
      req.socket.destroy();
      return;
    }
    const failed = results.filter((r) => 'ErrorCode' in r).length;
    send(res, 200, { Entries: results, FailedEntryCount: failed });
  };

  const control = (req: IncomingMessage, res: ServerResponse, url: string, body: string) => {
    if (url === '/_local/events' && req.method === 'GET') return send(res, 200, events);
    if (url === '/_local/stats' && req.method === 'GET') return send(res, 200, stats);
    if (url === '/_local/faults' && req.method === 'PUT') {
      faults = JSON.parse(body || '{}');
      return send(res, 200, faults);
    }
    if (url === '/_local/reset' && req.method === 'POST') {
      bus.reset();
      return send(res, 200, {});
    }
    return sendError(res, 404, 'NotFound', url);
  };

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      handle(req, res, Buffer.concat(chunks)).catch((error: unknown) => {
        sendError(res, 500, 'InternalException', String(error));
      });
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', resolve);
  });
  const address = server.address() as AddressInfo;

  const bus: LocalBus = {
    url: `http://${options.host ?? '127.0.0.1'}:${address.port}`,
    port: address.port,
    events,
    get stats() {
      return stats;
    },
    emitter,
    setFaults(next) {
      faults = { ...next };
    },
    reset() {
      events.length = 0;
      stats = emptyStats();
      eventsV2.reset();
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
  return bus;
}

async function delay(faults: Faults, random: () => number): Promise<void> {
  let ms = 0;
  const l = faults.latencyMs;
  if (typeof l === 'number') ms = l;
  else if (Array.isArray(l)) ms = l[0] + random() * (l[1] - l[0]);
  if (faults.spikeRate && random() < faults.spikeRate) ms += faults.spikeMs ?? 2_000;
  if (ms > 0) await new Promise((r) => setTimeout(r, ms));
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/x-amz-json-1.1',
    'content-length': Buffer.byteLength(text),
    'x-amzn-requestid': randomUUID(),
  });
  res.end(text);
}

function sendError(res: ServerResponse, status: number, type: string, message: string): void {
  const text = JSON.stringify({ __type: type, message });
  res.writeHead(status, {
    'content-type': 'application/x-amz-json-1.1',
    'content-length': Buffer.byteLength(text),
    'x-amzn-errortype': type,
    'x-amzn-requestid': randomUUID(),
  });
  res.end(text);
}
