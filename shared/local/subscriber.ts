/**
 * A local subscriber of the local bus's Custom Event Bus (EventsV2), the stand-in for an
 * `AWS::EventsV2::Subscriber` with a Lambda target invoked `REQUEST_RESPONSE` and `MaxBatchSize` 1:
 * it takes the events the bus accepted for one bus ARN and calls `target` (an async function, as
 * tests invoke an inbox handler) with one event per call, awaiting each result.
 *
 * - `type: 'FIFO'`: per `EventGroupId` (SystemMetadata, the relay's aggregate), in the bus's
 *   sequence-number order, one call in flight per group; a failed call is retried per the retry
 *   policy and holds up only its own group (User Guide, "Ordering and deduplicating events"; the
 *   brief of issue 35). The User Guide's retry page says a failed call holds up every group of the
 *   subscriber: `holdUp: 'all'` models that reading (no other group's call starts while a failed
 *   one waits for its retry). An event without a group is a group of its own.
 * - `type: 'UNORDERED'`: up to `concurrency` calls at once, the next pending event drawn at random
 *   (seeded) among those due (`jitterMs`: each one due after a random delay), and a failed one
 *   retried after its delay while the others go on: a classic bus's order, or rather its absence.
 * - Retry policy (User Guide, "Retry policies and dead-letter queues"): `maxRetryAttempts` retries
 *   after the first attempt (default 5, AWS's range 0–185) or until the event is
 *   `maxEventAgeSeconds` old, counted from the bus's acceptance (default 300, AWS's range 60–86,400;
 *   any positive number here, so that tests run in seconds), whichever comes first. The delay
 *   before retry n is `retryDelayMs(n)`, ms (default 20 × 2^(n−1), at most 500: AWS does not
 *   publish its backoff). A call that has not returned after `invocationTimeoutSeconds` (default
 *   30, the target's `InvocationTimeoutSeconds`) is a failed attempt.
 * - The target: any async function (tests pass an inbox handler, as they invoke one), or
 *   {@link lambdaTarget}, Lambda's Invoke API over HTTP (`RequestResponse`; `FunctionError` fails).
 * - Dead-letter record ({@link DeadLetterRecord}, the User Guide's shape): written once the retries
 *   are exhausted to `deadLetter` (e.g. {@link sqsDeadLetter}, a queue of the local SQS), naming the
 *   event (`eventId`, `eventGroupId`, `deduplicationId`) and the last error, **without the payload**.
 *   Without a sink the event is dropped and counted (`EventsDropped`).
 * - What the target receives (User Guide, "Transforming events with JSONata"; "Lambda function
 *   target"): `transformer: 'RAW'` (default, and what the `OutboxConsumer` construct deploys) the
 *   published data unchanged, for PutEvents the EventBridge event `{ version, id, detail-type,
 *   source, account, time, region, resources, detail }` ({@link rawEvent}); `'WITH_METADATA'`
 *   `{ Data: <that event>, SystemMetadata: { ContentType, 'aws:EventId', 'aws:IngestionTime',
 *   'aws:SequenceNumber', 'aws:DeliveryType', 'aws:Source', 'aws:DetailType', EventGroupId?,
 *   DeduplicationId? } }`, every value a
 *   string, a field without a value omitted ({@link withMetadata}).
 * - Starting position: `'LATEST'` (default) the events accepted from now on; `{ pointInTime }`
 *   (ms since the epoch, `StartingPosition: POINT_IN_TIME`) also the events the bus accepted since
 *   then, first, in sequence order, each delivered with `aws:DeliveryType` `REPLAY` (the events
 *   accepted after the subscriber was created are `LIVE`).
 *
 * The bus drops a DeduplicationId it accepted within 5 minutes (bus/eventsv2.ts), so what
 * the subscriber delivers is each accepted event, once per successful call; `stats` counts calls.
 */
import { InvokeCommand, type LambdaClient } from '@aws-sdk/client-lambda';
import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { AcceptedEvent, LocalBus } from './bus.ts';
import { seeded } from './seeded.ts';

/** The account and region the local bus's events carry (any 12 digits do). */
const ACCOUNT = '123456789012';
const REGION = 'eu-west-1';

/** `aws:DeliveryType`: `LIVE` as published, `REPLAY` read back from the bus's retention. */
export type DeliveryType = 'LIVE' | 'REPLAY';

/** The EventBridge event of a PutEvents entry, as a RAW subscriber hands it to a Lambda function. */
export interface SubscriberEvent {
  version: '0';
  id: string;
  'detail-type': string;
  source: string;
  account: string;
  time: string;
  region: string;
  resources: string[];
  detail: Record<string, unknown>;
}

/** A WITH_METADATA delivery: the data and what EventBridge assigned (every value a string). */
export interface WithMetadataEvent {
  Data: SubscriberEvent;
  SystemMetadata: Record<string, string>;
}

/** The dead-letter record (User Guide, "The dead-letter record"): names events, holds no payload. */
export interface DeadLetterRecord {
  version: '1.0';
  busArn: string;
  subscriberArn: string;
  targetArn: string;
  errorCode: string;
  errorMessage: string;
  exhaustedRetryCondition: 'MaximumRetryAttempts' | 'MaximumEventAgeInSeconds';
  retryAttempts: number;
  failedMessages: {
    eventId: string;
    eventGroupId: string | null;
    deduplicationId: string | null;
    /** When the bus accepted it, ISO 8601. */
    timestamp: string;
    targetRequestId: string;
  }[];
}

/** One call of the target, as {@link LocalSubscriber.calls} records it. */
export interface SubscriberCall {
  /** The bus's EventId (`aws:EventId`). */
  eventId: string;
  eventGroupId: string | undefined;
  sequenceNumber: string;
  deliveryType: DeliveryType;
  /** 1 for the first attempt. */
  attempt: number;
  ok: boolean;
  /** The error's name when the call failed (`InboxGapError`, `Error`, `InvocationTimeout`). */
  error?: string;
  /** ms since the epoch, when the call started and ended. */
  startedAt: number;
  endedAt: number;
}

/** Counters of a subscriber. */
export interface SubscriberStats {
  /** Target calls, and those that returned (a delivered event). */
  attempts: number;
  delivered: number;
  failed: number;
  /** Events whose retries ran out, written to the dead-letter sink, or dropped without one. */
  deadLettered: number;
  dropped: number;
  /** REPLAY deliveries among `delivered`. */
  replayed: number;
  /** Most calls in flight at once, in one group (FIFO: never above 1) and in all. */
  maxInFlightPerGroup: number;
  maxInFlight: number;
}

/** Options of {@link startSubscriber}. */
export interface SubscriberOptions {
  bus: LocalBus;
  /** The Custom Event Bus's ARN: only its events are delivered. */
  eventBusArn: string;
  type: 'FIFO' | 'UNORDERED';
  /** The function: its promise resolving is a delivery, rejecting (or timing out) a failed attempt. */
  target: (event: SubscriberEvent | WithMetadataEvent) => Promise<unknown>;
  /** The DATA filter's stand-in: deliver only the events it accepts. Default all. */
  filter?: (event: AcceptedEvent) => boolean;
  transformer?: 'RAW' | 'WITH_METADATA';
  retryPolicy?: { maxRetryAttempts?: number; maxEventAgeSeconds?: number };
  /** Delay before retry `n` (1, 2…), ms. */
  retryDelayMs?: (retry: number) => number;
  /** Default 30, as `InvocationTimeoutSeconds`. */
  invocationTimeoutSeconds?: number;
  /** Where a record goes once the retries are exhausted; without one the event is dropped. */
  deadLetter?: (record: DeadLetterRecord) => Promise<void> | void;
  /** `'LATEST'` (default) or `{ pointInTime }`, ms since the epoch: see the module's docstring. */
  startingPosition?: 'LATEST' | { pointInTime: number };
  /** UNORDERED: calls in flight at most (default 10). */
  concurrency?: number;
  /**
   * UNORDERED: each event becomes deliverable after a random delay of up to this many ms from its
   * acceptance (delivery latency varies; default 0), so that close events of a group overtake one
   * another.
   */
  jitterMs?: number;
  /** UNORDERED: seed of the draw of the next event and of the jitter. */
  seed?: number;
  /** The subscriber's name, in its ARN and the dead-letter record. Default `local`. */
  name?: string;
  /**
   * FIFO: what a failed call holds up until its event is delivered or dead-lettered. `'group'`
   * (default): only its own group. `'all'`: every group of the subscriber — no other group's call
   * starts while it waits for its retry — the worst reading of the User Guide's retry page ("holds
   * up the later events of every event group … delaying all of the subscriber's events").
   */
  holdUp?: 'group' | 'all';
}

/** A running subscriber. */
export interface LocalSubscriber {
  readonly arn: string;
  readonly stats: SubscriberStats;
  /** Every call of the target, in the order they ended. */
  readonly calls: SubscriberCall[];
  /** Why the dead-letter sink refused records (each such event counted `dropped`). */
  readonly deadLetterErrors: unknown[];
  /** Resolves once nothing is pending, waiting for a retry or in flight (or rejects after `timeoutMs`). */
  idle(timeoutMs?: number): Promise<void>;
  /** Stops taking events and retrying; resolves once the calls in flight ended. */
  close(): Promise<void>;
}

interface Pending {
  event: AcceptedEvent;
  deliveryType: DeliveryType;
  /** Attempts made so far. */
  attempts: number;
  /** Not before this, ms since the epoch (a retry's delay). */
  notBefore: number;
}

/** The RAW payload of an accepted PutEvents entry: the EventBridge event. */
export function rawEvent(e: AcceptedEvent): SubscriberEvent {
  return {
    version: '0',
    id: e.id,
    'detail-type': e.detailType,
    source: e.source,
    account: ACCOUNT,
    // EventBridge writes `time` to the second.
    time: (e.time ?? new Date(e.receivedAt).toISOString()).replace(/\.\d{3}Z$/, 'Z'),
    region: REGION,
    resources: [],
    detail: JSON.parse(e.detailText),
  };
}

/** The WITH_METADATA payload of an accepted entry. */
export function withMetadata(e: AcceptedEvent, deliveryType: DeliveryType): WithMetadataEvent {
  const system: Record<string, string> = {
    ContentType: 'application/eventbridge+json',
    'aws:EventId': e.id,
    'aws:IngestionTime': new Date(e.receivedAt).toISOString(),
    'aws:DeliveryType': deliveryType,
    // The event's Source and DetailType, so a function can route without parsing Data.
    'aws:Source': e.source,
    'aws:DetailType': e.detailType,
  };
  if (e.sequenceNumber !== undefined) system['aws:SequenceNumber'] = e.sequenceNumber;
  if (e.eventGroupId !== undefined) system.EventGroupId = e.eventGroupId;
  if (e.deduplicationId !== undefined) system.DeduplicationId = e.deduplicationId;
  return { Data: rawEvent(e), SystemMetadata: system };
}

/** A dead-letter sink writing each record as one message to a queue (the local SQS's, or any). */
export function sqsDeadLetter(client: SQSClient, queueUrl: string) {
  return async (record: DeadLetterRecord) => {
    await client.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: JSON.stringify(record) }));
  };
}

/**
 * A target invoking a function through Lambda's Invoke API, `RequestResponse`, as the subscriber's
 * `LambdaParameters.InvocationType: REQUEST_RESPONSE` does (shared/local/lambda.ts, or any endpoint):
 * an answer with `FunctionError` is a failed delivery, named by the function's `errorType`.
 */
export function lambdaTarget(client: LambdaClient, functionName: string) {
  return async (event: SubscriberEvent | WithMetadataEvent) => {
    const out = await client.send(
      new InvokeCommand({
        FunctionName: functionName,
        InvocationType: 'RequestResponse',
        Payload: Buffer.from(JSON.stringify(event)),
      }),
    );
    const text = out.Payload ? Buffer.from(out.Payload).toString('utf8') : '';
    if (out.FunctionError) {
      let answer: { errorType?: string; errorMessage?: string } = {};
      try {
        answer = JSON.parse(text);
      } catch {}
      const error = new Error(answer.errorMessage ?? out.FunctionError);
      error.name = answer.errorType ?? 'FunctionError';
      throw error;
    }
    return text === '' ? undefined : JSON.parse(text);
  };
}

class InvocationTimeout extends Error {
  override name = 'InvocationTimeout';
}

function compareSequence(a: string, b: string): number {
  return a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
}

/** Subscribes to the bus's accepted events of `eventBusArn` and starts delivering them. */
export function startSubscriber(options: SubscriberOptions): LocalSubscriber {
  const { bus, eventBusArn, type, target } = options;
  const maxRetryAttempts = options.retryPolicy?.maxRetryAttempts ?? 5;
  const maxEventAgeMs = (options.retryPolicy?.maxEventAgeSeconds ?? 300) * 1000;
  if (!Number.isInteger(maxRetryAttempts) || maxRetryAttempts < 0 || maxRetryAttempts > 185)
    throw new RangeError(`retryPolicy.maxRetryAttempts: 0 to 185, got ${maxRetryAttempts}`);
  if (!(maxEventAgeMs > 0) || maxEventAgeMs > 86_400_000)
    throw new RangeError('retryPolicy.maxEventAgeSeconds: above 0 and at most 86,400');
  const retryDelay = options.retryDelayMs ?? ((n: number) => Math.min(500, 20 * 2 ** (n - 1)));
  const timeoutMs = (options.invocationTimeoutSeconds ?? 30) * 1000;
  const transformer = options.transformer ?? 'RAW';
  const concurrency = options.concurrency ?? 10;
  const random = options.seed === undefined ? Math.random : seeded(options.seed);
  const name = options.name ?? 'local';
  const arn = `arn:aws:events:${REGION}:${ACCOUNT}:subscriber/${name}/local`;

  const stats: SubscriberStats = {
    attempts: 0,
    delivered: 0,
    failed: 0,
    deadLettered: 0,
    dropped: 0,
    replayed: 0,
    maxInFlightPerGroup: 0,
    maxInFlight: 0,
  };
  const calls: SubscriberCall[] = [];
  const deadLetterErrors: unknown[] = [];
  let closed = false;
  /** Attempts not settled yet (called, or writing their dead-letter record). */
  let inFlight = 0;
  /** Target calls not answered yet (the figure `maxInFlight` reports). */
  let calling = 0;
  const inFlightByGroup = new Map<string, number>();
  /** FIFO: each group's queue, head first. UNORDERED: one pool under the key ''. */
  const queues = new Map<string, Pending[]>();
  /** FIFO: the groups whose head is being worked on (called, or waiting for its retry). */
  const busy = new Set<string>();
  /** FIFO with `holdUp: 'all'`: the groups whose head failed and waits for its retry. */
  const failing = new Set<string>();
  const holdUpAll = type === 'FIFO' && options.holdUp === 'all';
  if (options.holdUp !== undefined && options.holdUp !== 'group' && options.holdUp !== 'all')
    throw new RangeError(`holdUp: 'group' or 'all', got ${String(options.holdUp)}`);
  const timers = new Set<NodeJS.Timeout>();
  const running = new Set<Promise<void>>();
  let idleWaiters: (() => void)[] = [];

  const groupOf = (e: AcceptedEvent) => (type === 'FIFO' ? (e.eventGroupId ?? `\u0000${e.id}`) : '');
  const pendingCount = () => [...queues.values()].reduce((n, q) => n + q.length, 0);
  const checkIdle = () => {
    if (pendingCount() === 0 && inFlight === 0 && timers.size === 0) {
      const waiters = idleWaiters;
      idleWaiters = [];
      for (const w of waiters) w();
    }
  };

  const enqueue = (event: AcceptedEvent, deliveryType: DeliveryType) => {
    if (closed || event.eventBusName !== eventBusArn) return;
    if (options.filter && !options.filter(event)) return;
    const key = groupOf(event);
    const queue = queues.get(key) ?? [];
    queues.set(key, queue);
    const pending: Pending = { event, deliveryType, attempts: 0, notBefore: 0 };
    queue.push(pending);
    const jitter = type === 'UNORDERED' ? random() * (options.jitterMs ?? 0) : 0;
    if (jitter > 0) {
      pending.notBefore = Date.now() + jitter;
      later(pending, jitter);
    }
    pump();
  };

  /** Makes `p` due after `ms` (not by the clock: a timer may fire a millisecond early). */
  const later = (p: Pending, ms: number) => {
    const timer = setTimeout(() => {
      timers.delete(timer);
      p.notBefore = 0;
      pump();
      checkIdle();
    }, ms);
    timers.add(timer);
  };

  /** Starts every call that may start now. */
  const pump = () => {
    if (closed) return;
    const now = Date.now();
    if (type === 'FIFO') {
      for (const [key, queue] of queues) {
        const head = queue[0];
        if (!head || busy.has(key) || head.notBefore > now) continue;
        // A failed call waiting for its retry holds up every other group.
        if (holdUpAll && failing.size > 0 && !failing.has(key)) continue;
        busy.add(key);
        track(call(key, head));
      }
      return;
    }
    const pool = queues.get('') ?? [];
    while (inFlight < concurrency) {
      const ready = pool.filter((p) => p.notBefore <= now);
      if (ready.length === 0) break;
      const chosen = ready[Math.floor(random() * ready.length)] as Pending;
      pool.splice(pool.indexOf(chosen), 1);
      track(call('', chosen));
    }
  };

  const track = (p: Promise<void>) => {
    running.add(p);
    // An attempt's own failures are caught in it; nothing may escape as an unhandled rejection.
    p.catch(() => {}).finally(() => {
      running.delete(p);
      checkIdle();
    });
  };

  const invoke = async (p: Pending) => {
    const payload = transformer === 'RAW' ? rawEvent(p.event) : withMetadata(p.event, p.deliveryType);
    let timer: NodeJS.Timeout | undefined;
    try {
      await Promise.race([
        target(payload),
        new Promise((_, reject) => {
          timer = setTimeout(
            () => reject(new InvocationTimeout(`no answer within ${timeoutMs} ms`)),
            timeoutMs,
          );
        }),
      ]);
    } finally {
      clearTimeout(timer);
    }
  };

  /** One attempt; it counts as in flight until its outcome (a retry scheduled, a dead-letter record written). */
  const call = (key: string, p: Pending) =>
    attempt(key, p).finally(() => {
      inFlight--;
      pump();
    });

  const attempt = async (key: string, p: Pending) => {
    const group = p.event.eventGroupId ?? `\u0000${p.event.id}`;
    inFlight++;
    calling++;
    inFlightByGroup.set(group, (inFlightByGroup.get(group) ?? 0) + 1);
    stats.maxInFlight = Math.max(stats.maxInFlight, calling);
    stats.maxInFlightPerGroup = Math.max(stats.maxInFlightPerGroup, inFlightByGroup.get(group) ?? 0);
    p.attempts++;
    stats.attempts++;
    const startedAt = Date.now();
    let error: unknown;
    try {
      await invoke(p);
    } catch (e) {
      error = e ?? new Error('rejected');
    }
    calling--;
    inFlightByGroup.set(group, (inFlightByGroup.get(group) ?? 1) - 1);
    const record: SubscriberCall = {
      eventId: p.event.id,
      eventGroupId: p.event.eventGroupId,
      sequenceNumber: p.event.sequenceNumber ?? '0',
      deliveryType: p.deliveryType,
      attempt: p.attempts,
      ok: error === undefined,
      startedAt,
      endedAt: Date.now(),
    };
    if (error !== undefined) record.error = error instanceof Error ? error.name : 'Error';
    calls.push(record);

    const done = () => {
      failing.delete(key);
      if (type === 'FIFO') {
        queues.get(key)?.shift();
        if (queues.get(key)?.length === 0) queues.delete(key);
        busy.delete(key);
      }
      pump();
    };
    if (error === undefined) {
      stats.delivered++;
      if (p.deliveryType === 'REPLAY') stats.replayed++;
      return done();
    }
    stats.failed++;
    const age = Date.now() - p.event.receivedAt;
    const exhausted =
      p.attempts > maxRetryAttempts
        ? ('MaximumRetryAttempts' as const)
        : age >= maxEventAgeMs
          ? ('MaximumEventAgeInSeconds' as const)
          : undefined;
    if (exhausted === undefined && !closed) {
      p.notBefore = Date.now() + retryDelay(p.attempts);
      if (type === 'UNORDERED') {
        const pool = queues.get('') ?? [];
        queues.set('', pool);
        pool.push(p);
      }
      later(p, Math.max(0, p.notBefore - Date.now()));
      if (holdUpAll) failing.add(key);
      if (type === 'FIFO') busy.delete(key);
      return;
    }
    if (exhausted !== undefined) {
      await deadLetter(p, exhausted, error);
    }
    done();
  };

  const deadLetter = async (
    p: Pending,
    exhausted: DeadLetterRecord['exhaustedRetryCondition'],
    error: unknown,
  ) => {
    if (!options.deadLetter) {
      stats.dropped++;
      return;
    }
    const e = p.event;
    const write = options.deadLetter;
    const record: DeadLetterRecord = {
      version: '1.0',
      busArn: eventBusArn,
      subscriberArn: arn,
      targetArn: 'arn:aws:lambda:eu-west-1:123456789012:function:local-target',
      errorCode: error instanceof Error ? error.name : 'Error',
      errorMessage: error instanceof Error ? error.message : String(error),
      exhaustedRetryCondition: exhausted,
      retryAttempts: p.attempts - 1,
      failedMessages: [
        {
          eventId: e.id,
          eventGroupId: e.eventGroupId ?? null,
          deduplicationId: e.deduplicationId ?? null,
          timestamp: new Date(e.receivedAt).toISOString(),
          targetRequestId: `local-${e.id}-${p.attempts}`,
        },
      ],
    };
    try {
      await write(record);
      stats.deadLettered++;
    } catch (error) {
      // As when the dead-letter queue refuses the record: the event is dropped (`EventsDropped`).
      stats.dropped++;
      deadLetterErrors.push(error);
    }
  };

  const start = options.startingPosition ?? 'LATEST';
  if (start !== 'LATEST') {
    const history = bus.events
      .filter((e) => e.eventBusName === eventBusArn && e.receivedAt >= start.pointInTime)
      .sort((a, b) => compareSequence(a.sequenceNumber ?? '0', b.sequenceNumber ?? '0'));
    for (const e of history) enqueue(e, 'REPLAY');
  }
  const onAccepted = (e: AcceptedEvent) => enqueue(e, 'LIVE');
  bus.emitter.on('accepted', onAccepted);

  return {
    arn,
    stats,
    calls,
    deadLetterErrors,
    idle(ms = 20_000) {
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(
          () =>
            reject(
              new Error(
                `subscriber not idle after ${ms} ms: ${pendingCount()} pending, ${inFlight} in flight, ${timers.size} retries waiting`,
              ),
            ),
          ms,
        );
        idleWaiters.push(() => {
          clearTimeout(timer);
          resolve();
        });
        checkIdle();
      });
    },
    async close() {
      closed = true;
      bus.emitter.off('accepted', onAccepted);
      for (const t of timers) clearTimeout(t);
      timers.clear();
      await Promise.allSettled([...running]);
    },
  };
}
