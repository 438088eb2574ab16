/**
 * The inbox: wraps the handler of a Lambda that is the target of EventBridge rules, so that each
 * event is applied once per consumer although the outbox (and EventBridge) deliver at least once.
 *
 * Each invocation runs in one transaction (`sql.begin`, see invocation.ts): the inbox records the
 * event for this consumer (`inbox_message`, keyed by consumer and `metadata.eventId` or a business
 * key), decides from its chain's order state whether the handler runs (order.ts), and hands the
 * handler that transaction as `context.inbox.tx`, so the handler's writes commit together with the
 * record, or not at all (docs/guarantees.md#what-is-promised: a consumer invocation is all or nothing).
 *
 * The inbox wraps the handler itself rather than being a middy middleware: the transaction begins
 * and ends inside the handler's call, so no other middleware can skip its COMMIT or ROLLBACK (a
 * middy middleware whose `after` or `onError` returns a value cuts the chain short, and the
 * middlewares after it never run). Only middy's early timeout answers without waiting for the
 * call: its abort rolls the transaction back at once, and the event's trace was written before the
 * transaction began (trace.ts). Use it alone, or as the handler of a middy chain:
 *
 * ```ts
 * export const handler = inbox({ sql, consumer: 'billing', schema: OrderPlaced.schema },
 *   async (_event, { inbox }) => {
 *     await inbox.tx`insert into invoices ${inbox.tx({ order_id: inbox.metadata.aggregateId })}`;
 *   });
 * ```
 */
import type { Context, EventBridgeEvent } from 'aws-lambda';
import { isConnectionFailure } from '../platform/connection-errors.ts';
import { ConnectionPool, type Sql, type Tx } from '../platform/db.ts';
import type { EnvelopeMetadata } from '../platform/envelope.ts';
import { EnvVar, HEARTBEAT_EVENT, InboxMetricName } from '../platform/names.ts';
import type { PayloadSchema } from '../producer/typed-events.ts';
import {
  type DeliveryOrigin,
  deliveriesOf,
  type InboxEvent,
  readDelivery,
  unwrapDelivery,
  type WithMetadataDelivery,
} from './delivery.ts';
import { InboxGapError, InboxOptionsError, translateSchemaError } from './errors.ts';
import { InboxAbortedError, InvocationTransaction, lambdaDeadline } from './invocation.ts';
import { type InboxMetricsOptions, inboxMetrics } from './metrics.ts';
import {
  type Decision,
  decide,
  handlerFailureReason,
  type InboxArrival,
  type InboxOrder,
  type InboxSkip,
  type OrderSettings,
  rememberGap,
  WaitingForLowerEvent,
  waitForChain,
} from './order.ts';
import { markHeld, readHandlerFailures, recordMessage } from './sql/index.ts';
import { abortSignalOf, FailureTrace } from './trace.ts';

/**
 * How long Lambda keeps retrying an asynchronous invocation that failed, seconds: by default it
 * retries a function error twice, one minute and then two minutes later ("How Lambda handles
 * errors and retries with asynchronous invocation", AWS Lambda Developer Guide). EventBridge
 * invokes rule targets asynchronously; the rule's own retry policy covers only getting the event
 * into Lambda's queue, not a handler that fails.
 */
export const LAMBDA_ASYNC_RETRY_WINDOW_SECONDS = 180;

/**
 * How long Lambda keeps an asynchronous event, and so how late a retry can come, seconds: its
 * default and largest `MaximumEventAgeInSeconds`, 6 hours (AWS Lambda API reference,
 * PutFunctionEventInvokeConfig). Retries of a throttled function can come that late.
 */
export const LAMBDA_MAX_EVENT_AGE_SECONDS = 21_600;

/**
 * The least slack between `gapWaitSeconds` and `retryWindowSeconds`, seconds: the last retry must
 * come after the wait, and Lambda's schedule ("one minute, then two") is approximate. It is this,
 * or a tenth of the window if that is more.
 */
const MIN_GAP_SLACK_SECONDS = 5;

/** Options of {@link inbox}. */
export interface InboxOptions<T> {
  /**
   * A pool; each invocation holds one of its connections for its transaction. Pass a
   * {@link ConnectionPool} (`new ConnectionPool(() => connect())`) so that an invocation that lost
   * its connection replaces the pool: porsager `postgres` 3.4.9 can otherwise hand the next
   * invocation of a warm container the dead session's error, or hang it (porsager/postgres#1199).
   */
  sql: Sql | ConnectionPool;
  /** This consumer's name: each consumer processes each event once, independently of the others. */
  consumer: string;
  /**
   * The deduplication key, from the whole event (its `type`, `source`, `metadata` and validated
   * `data`). Default: `metadata.eventId`. Key on a business identity instead when the same fact can
   * arrive by two routes with two event ids, and put the type in it when two types share the
   * identity (`${type}:${data.orderId}`). A non-empty string of at most 512 characters.
   */
  key?: (event: InboxEvent<T>) => string;
  /**
   * The event types (DetailTypes) this consumer's rule delivers, when it delivers only some of its
   * aggregates' types. An order-aware consumer then keeps each type of an aggregate in order on its
   * own, by `metadata.typeSequence` (1, 2, 3… per aggregate and type), and never waits for an event
   * of a type it does not receive. An event of another type fails with {@link InboxEnvelopeError}
   * (`detail-type`): the rule and the declaration disagree. Leave it out when the rule delivers every
   * type of the aggregates (order is then kept across types, by `metadata.sequence`).
   */
  types?: readonly string[];
  /**
   * - `none` (default): any order.
   * - `ignore-stale`: for a consumer that keeps the latest state, where a later event of a chain
   *   supersedes the earlier ones: an event not newer than the last one applied of its chain is
   *   acknowledged as `stale` without running the handler (recorded with the reason, counted as
   *   `InboxStale`); a newer one is applied, gaps or not.
   * - `wait-for-gap`: an event that skips one of its chain fails with {@link InboxGapError}, so that
   *   Lambda retries it later, for at most `gapWaitSeconds` from its first delivery; the first
   *   attempt after that applies it (`onGapTimeout: 'process'`) or parks it (`'park'`), and the
   *   chain moves on past the gap. A late event (the missing one, after all) is applied.
   * A chain is an aggregate's events from one source, or with `types` one type of them. A chain
   * never seen before expects its #1.
   */
  order?: InboxOrder;
  /**
   * wait-for-gap: how long to keep failing an event ahead of a gap, seconds, measured on the
   * database clock from its first delivery, however late or missed its retries were. Default 120,
   * so that Lambda's last retry (about 180 s after the first attempt) comes after the wait and
   * applies or parks the event. At most `retryWindowSeconds` less 5 s or a tenth of it, whichever
   * is more (the schedule is approximate); 0 applies or parks at once.
   */
  gapWaitSeconds?: number;
  /**
   * wait-for-gap: what to do after the wait. `process` (default): apply it (`arrival: 'ahead'`).
   * `park`: do not run the handler; keep the event whole in `inbox_message` (outcome `parked`),
   * count it (`InboxParked`, and the monitor's `InboxParkedCount`, alarmed on) for an operator to
   * re-apply (`outbox inbox parked replay`) or discard. Either way its chain goes on.
   */
  onGapTimeout?: 'process' | 'park';
  /**
   * Park an event after this many failed handler calls, acknowledge it, and hold its aggregate: the
   * aggregate's later events are parked behind it, in order (recorded whole, counted `InboxParked`,
   * alarmed on by the monitor's `InboxParkedCount`), until an operator replays them in order
   * (`outbox inbox parked replay`, which applies them one by one and stops at the first that fails
   * again) or discards them. Only the handler's failures count (its error, or its running past the
   * deadline): an InboxGapError retry (wait-for-gap, the event waits for a missing earlier one), a
   * lost connection and an invalid envelope do not. For a Custom Event Bus FIFO subscriber, where a
   * failed call holds up every group of the subscriber and some failures are retried without limit
   * (docs/buses.md#a-failing-event-on-a-custom-event-bus): the delay it causes the other aggregates
   * is bounded by this many attempts. An integer from 1. Default:
   * `OUTBOX_INBOX_PARK_AFTER_ATTEMPTS` when set (the OutboxConsumer construct sets 3 on a Custom
   * Event Bus subscriber), else off (a failing handler fails its invocation every time).
   */
  parkAfterAttempts?: number;
  /**
   * When the invoker's last retry of a failed invocation comes, seconds after the first attempt;
   * bounds `gapWaitSeconds`. Default: `OUTBOX_INBOX_RETRY_WINDOW_SECONDS` when set (the
   * OutboxConsumer construct sets it from the function's retries), else
   * {@link LAMBDA_ASYNC_RETRY_WINDOW_SECONDS} (180, Lambda's default asynchronous retries). Set it
   * when the function's `MaximumRetryAttempts` is not 2 (0 retries: 0; 1 retry: 60).
   */
  retryWindowSeconds?: number;
  /**
   * The function's maximum event age (`MaximumEventAgeInSeconds` of its asynchronous invocation
   * configuration), seconds, 60 to 21,600: no retry comes later than this after the previous
   * attempt. An event delivered again after a longer pause (a replay from the on-failure
   * destination) waits for its gap anew; one that waits no longer counts for the events behind
   * it. Default: `OUTBOX_INBOX_MAX_EVENT_AGE_SECONDS` when set (by the OutboxConsumer construct),
   * else {@link LAMBDA_MAX_EVENT_AGE_SECONDS} (6 hours, Lambda's default). Must be at least
   * `retryWindowSeconds`: with less, Lambda discards the event before its last retry.
   */
  maxEventAgeSeconds?: number;
  /**
   * How long the inbox's records are kept, days, 2 to 3,650: the prune's retention
   * (`OUTBOX_INBOX_RETENTION_DAYS` of the monitor). An event with no record that is older than
   * this may have been applied and its record pruned: it is answered `stale` (reason
   * `beyond-retention`), not applied again (a bus replay of an archive older than the retention).
   * Default: `OUTBOX_INBOX_RETENTION_DAYS` when set, else 30 (the prune's default). Keep the bus's
   * archive and replays within it (the OutboxConsumer construct refuses a longer bus retention).
   */
  retentionDays?: number;
  /**
   * How long before the Lambda deadline the invocation gives up, ms: it cancels the statement
   * running (the inbox's or the handler's), rolls back, refuses the handler's further statements
   * and fails. It must leave time for the ROLLBACK. Default 500. A context without
   * `getRemainingTimeInMillis` (not Lambda) counts from 60 s.
   */
  deadlineMarginMs?: number;
  /**
   * Validates `detail.data` (a zod schema, e.g. from `defineEvent`); data that does not match fails
   * the invocation with {@link InboxPayloadError} naming the field.
   */
  schema?: PayloadSchema<T>;
  /**
   * The inbox's metrics (`InboxParked`, `InboxStale`, `InboxLate`, `InboxAfterGap`, `ConsumerLag`
   * per applied event, `HeartbeatReceived` and `HeartbeatAgeSeconds` per heartbeat; dimension
   * `consumer`), as CloudWatch EMF lines on stdout. Default: on, namespace `Outbox`. `false`: off.
   */
  metrics?: InboxMetricsOptions | false;
  /**
   * Runs each invocation in a span: `inboxTracing` of `@outbox-relay-aws/consumer/otel`, the
   * OpenTelemetry span in the producer's trace (docs/observe.md#the-trace). Default: no span.
   */
  tracing?: (consumer: string) => <R>(event: unknown, run: () => Promise<R>) => Promise<R>;
}

/** What the inbox adds to the Lambda context the handler receives. */
export interface InboxContext<T = Record<string, unknown>> extends Context {
  inbox: {
    /**
     * The transaction the event is recorded in; the handler's writes go through it. Once the
     * invocation is over (deadline, lost connection, or the handler already returned), every
     * statement sent through it is refused with {@link InboxAbortedError}.
     */
    tx: Tx;
    metadata: EnvelopeMetadata;
    /** The payload, validated when a schema was given. */
    data: T;
    /** The DetailType. */
    type: string;
    /** The event's Source. */
    source: string;
    /** Where the event stood in its chain (see {@link InboxArrival}). */
    arrival: InboxArrival;
    /**
     * True when a Custom Event Bus subscriber delivered it as a replay of the bus's retention
     * (`SystemMetadata."aws:DeliveryType"` = `REPLAY`, a WITH_METADATA delivery). The inbox applies
     * it as any event (it was not applied yet); an event already applied is a `duplicate`.
     */
    replay: boolean;
  };
}

/** One element of a Custom Event Bus subscriber's array payload: a RAW event or a WITH_METADATA delivery. */
export type InboxDeliveryElement = EventBridgeEvent<string, unknown> | WithMetadataDelivery;

/** The handler the inbox wraps. */
export type InboxHandler<T, R> = (
  event: EventBridgeEvent<string, unknown>,
  context: InboxContext<T>,
) => Promise<R>;

interface Settings extends OrderSettings {
  deadlineMarginMs: number;
}

/**
 * A setting's default from the function's environment: the OutboxConsumer construct sets
 * `OUTBOX_INBOX_RETRY_WINDOW_SECONDS` and `OUTBOX_INBOX_MAX_EVENT_AGE_SECONDS` from the function's
 * asynchronous invocation settings, so that the handler need not repeat them. Unset or empty: no
 * default (the option's own applies). Read when `inbox()` is called, at cold start.
 * @throws InboxOptionsError naming the option and the variable when the value is not a number
 */
function fromEnv(field: string, variable: string): number | undefined {
  const raw = process.env[variable]?.trim();
  if (raw === undefined || raw === '') return undefined;
  const n = Number(raw);
  if (!Number.isFinite(n)) {
    throw new InboxOptionsError(field, `${variable} must be a number of seconds, got "${raw}"`);
  }
  return n;
}

function settingsOf<T>(options: InboxOptions<T>): Settings {
  const number = (field: keyof InboxOptions<T>, value: unknown, fallback: number, min: number) => {
    const n = value ?? fallback;
    if (typeof n !== 'number' || !Number.isFinite(n) || n < min) {
      throw new InboxOptionsError(field, `expected a finite number ≥ ${min}, got ${String(value)}`);
    }
    return n;
  };
  if (typeof options?.consumer !== 'string' || options.consumer.trim().length === 0) {
    throw new InboxOptionsError('consumer', 'expected a non-empty string naming this consumer');
  }
  if (!(options.sql instanceof ConnectionPool) && typeof options.sql?.begin !== 'function') {
    throw new InboxOptionsError('sql', 'expected a porsager `postgres` pool or a ConnectionPool');
  }
  const order = options.order ?? 'none';
  if (!['none', 'ignore-stale', 'wait-for-gap'].includes(order)) {
    throw new InboxOptionsError('order', `expected none, ignore-stale or wait-for-gap, got ${String(order)}`);
  }
  const onGapTimeout = options.onGapTimeout ?? 'process';
  if (!['process', 'park'].includes(onGapTimeout)) {
    throw new InboxOptionsError('onGapTimeout', `expected process or park, got ${String(onGapTimeout)}`);
  }
  const types = options.types;
  if (
    types !== undefined &&
    (!Array.isArray(types) ||
      types.length === 0 ||
      types.some((t) => typeof t !== 'string' || t.trim() === '' || t.length > 128))
  ) {
    throw new InboxOptionsError(
      'types',
      'expected a non-empty array of DetailTypes (non-empty strings of at most 128 characters)',
    );
  }
  if (options.key !== undefined && typeof options.key !== 'function') {
    throw new InboxOptionsError('key', 'expected a function of the event returning its key');
  }
  const retryWindowSeconds = number(
    'retryWindowSeconds',
    options.retryWindowSeconds ?? fromEnv('retryWindowSeconds', EnvVar.inboxRetryWindowSeconds),
    LAMBDA_ASYNC_RETRY_WINDOW_SECONDS,
    0,
  );
  const gapWaitSeconds = number('gapWaitSeconds', options.gapWaitSeconds, 120, 0);
  const slack = Math.max(MIN_GAP_SLACK_SECONDS, retryWindowSeconds / 10);
  if (order === 'wait-for-gap' && gapWaitSeconds > 0 && gapWaitSeconds > retryWindowSeconds - slack) {
    throw new InboxOptionsError(
      'gapWaitSeconds',
      `${gapWaitSeconds} s does not fit the retry window (retryWindowSeconds ${retryWindowSeconds} s, less ${slack} s for a retry that comes early): the last retry could come before the wait ends, and the event would go to the on-failure destination without being applied; at most ${Math.max(0, retryWindowSeconds - slack)} s`,
    );
  }
  const maxEventAgeSeconds = number(
    'maxEventAgeSeconds',
    options.maxEventAgeSeconds ?? fromEnv('maxEventAgeSeconds', EnvVar.inboxMaxEventAgeSeconds),
    LAMBDA_MAX_EVENT_AGE_SECONDS,
    60,
  );
  if (maxEventAgeSeconds > LAMBDA_MAX_EVENT_AGE_SECONDS) {
    throw new InboxOptionsError(
      'maxEventAgeSeconds',
      `expected at most ${LAMBDA_MAX_EVENT_AGE_SECONDS} (Lambda's largest MaximumEventAgeInSeconds), got ${maxEventAgeSeconds}`,
    );
  }
  if (maxEventAgeSeconds < retryWindowSeconds) {
    throw new InboxOptionsError(
      'maxEventAgeSeconds',
      `${maxEventAgeSeconds} s is less than the retry window (retryWindowSeconds ${retryWindowSeconds} s): Lambda would discard an event before its last retry`,
    );
  }
  const deadlineMarginMs = number('deadlineMarginMs', options.deadlineMarginMs, 500, 0);
  const parkAfterAttempts = parkAfterAttemptsOf(options.parkAfterAttempts);
  const envRetention = process.env[EnvVar.inboxRetentionDays]?.trim();
  const retentionDays =
    options.retentionDays ?? (envRetention ? Number(envRetention) : DEFAULT_INBOX_RETENTION_DAYS);
  if (
    typeof retentionDays !== 'number' ||
    !Number.isFinite(retentionDays) ||
    retentionDays < 2 ||
    retentionDays > 3_650
  ) {
    throw new InboxOptionsError(
      'retentionDays',
      `expected days from 2 to 3650 (the inbox's prune retention${options.retentionDays === undefined ? `, from ${EnvVar.inboxRetentionDays}` : ''}), got ${JSON.stringify(options.retentionDays ?? envRetention)}`,
    );
  }
  return {
    parkAfterAttempts,
    retentionSeconds: retentionDays * 86_400,
    consumer: options.consumer,
    order,
    types,
    gapWaitSeconds,
    retryWindowSeconds,
    maxEventAgeSeconds,
    onGapTimeout,
    deadlineMarginMs,
  };
}

/**
 * `parkAfterAttempts` from the option, else from `OUTBOX_INBOX_PARK_AFTER_ATTEMPTS` (unset or empty:
 * off). @throws InboxOptionsError naming the option (and the variable) when it is not an integer ≥ 1
 */
function parkAfterAttemptsOf(option: unknown): number | undefined {
  const raw = process.env[EnvVar.inboxParkAfterAttempts]?.trim();
  const value = option ?? (raw === undefined || raw === '' ? undefined : Number(raw));
  if (value === undefined) return undefined;
  if (typeof value !== 'number' || !Number.isInteger(value) || value < 1) {
    const from = option === undefined ? ` (${EnvVar.inboxParkAfterAttempts}="${raw}")` : '';
    throw new InboxOptionsError(
      'parkAfterAttempts',
      `expected a whole number of failed handler calls, at least 1, got ${String(option ?? raw)}${from}`,
    );
  }
  return value;
}

/**
 * Whether a failure of the handler's call counts towards `parkAfterAttempts`: the handler's error or
 * its running out of time, not a lost connection (the event is not at fault).
 */
function isHandlerFault(error: unknown): boolean {
  if (error instanceof InboxAbortedError) return error.reason !== 'connection';
  return !isConnectionFailure(error);
}
/** The prune's default retention of the inbox's records, days (shared/platform/config.ts). */
const DEFAULT_INBOX_RETENTION_DAYS = 30;

/** The longest business key: the same bound as the outbox's idempotency keys. */
const MAX_KEY_LENGTH = 512;

const ARRIVAL_METRIC: Partial<Record<InboxArrival, InboxMetricName>> = {
  late: InboxMetricName.Late,
  ahead: InboxMetricName.AfterGap,
};

/**
 * Wraps a handler with the inbox. The result is a Lambda handler `(event, context)`, to export as
 * it is or to give a middy chain as its handler (`middy().use(…).handler(inbox(options, fn))`).
 *
 * Every failure below leaves a trace in `inbox_failed` (the whole event, the error's name and
 * message, the attempts) before it leaves the handler, so that a wrapper that turns it into a
 * success (a middy `onError` returning a value) acknowledges nothing without a trace; the
 * transaction that later applies, parks or acknowledges the event deletes the trace (trace.ts).
 * Called with a third argument holding an AbortSignal (`{ signal }`, as middy calls its handler),
 * the inbox writes the trace before its transaction begins, as an attempt not yet finished, and
 * treats the signal's abort as its deadline (InboxAbortedError `signal`).
 * @returns what `handler` returned, or an {@link InboxSkip} when the handler did not run
 * @throws {InboxOptionsError} at once, when an option is invalid (it names the option)
 * @throws {InboxEnvelopeError} when the event is not an outbox envelope, its sequence is not a
 *   whole number from 1, or its type is not among `types` (it names the field)
 * @throws {InboxPayloadError} when `detail.data` does not match `schema` (it names the field)
 * @throws {InboxGapError} (wait-for-gap) to make Lambda retry the event later
 * @throws {InboxAbortedError} when the deadline or a lost connection ended the transaction
 * @throws {OutboxSchemaError} when the database has no inbox tables or functions (SQLSTATE 42P01,
 *   42883 or 42703): run `npx outbox migrate` against it; the handler did not run
 * @throws {InboxCommitError} when the transaction did not commit, e.g. a statement failed in it
 *   although the handler caught the error
 * @throws the handler's error, and database errors, never swallowed: the invocation fails and
 *   nothing is recorded
 */
export function inbox<T = Record<string, unknown>, R = unknown>(
  options: InboxOptions<T>,
  handler: InboxHandler<T, R>,
): (
  event: EventBridgeEvent<string, unknown> | WithMetadataDelivery | readonly InboxDeliveryElement[],
  context: Context,
  wrapper?: { signal?: AbortSignal },
) => Promise<R | InboxSkip | (R | InboxSkip)[]> {
  const settings = settingsOf(options);
  if (typeof handler !== 'function') {
    throw new InboxOptionsError('handler', 'expected the handler to wrap, a function (event, context)');
  }
  const metric = inboxMetrics(settings.consumer, options.metrics);
  const span = options.tracing?.(settings.consumer);
  const pool = options.sql instanceof ConnectionPool ? options.sql : undefined;

  const invoke = async (
    event: EventBridgeEvent<string, unknown>,
    context: Context,
    deadline: number,
    signal: AbortSignal | undefined,
    trace: FailureTrace,
    origin: DeliveryOrigin,
  ): Promise<R | InboxSkip> => {
    if (deadline - settings.deadlineMarginMs <= Date.now()) {
      throw new InboxAbortedError(
        'deadline',
        `less than deadlineMarginMs (${settings.deadlineMarginMs} ms) was left when the invocation started; nothing was run`,
      );
    }
    if (origin.refusal) throw origin.refusal;
    const delivery = readDelivery(event, { types: settings.types, schema: options.schema });
    const replay = origin.deliveryType === 'REPLAY';
    /** A replayed delivery is counted, with its event and what became of it (docs/consumer-operations.md#replays-from-the-custom-event-bus). */
    const replayed = (outcome: string) => {
      if (replay)
        metric(InboxMetricName.BusReplay, {
          eventId: delivery.metadata.eventId,
          outcome,
          deliveryType: 'REPLAY',
        });
    };
    const { type, source, metadata, data } = delivery;
    const key = options.key ? options.key({ type, source, metadata, data }) : metadata.eventId;
    if (typeof key !== 'string' || key.length === 0 || key.length > MAX_KEY_LENGTH) {
      throw new InboxOptionsError(
        'key',
        `the key function returned ${JSON.stringify(key)} for event ${metadata.eventId}: expected a non-empty string of at most ${MAX_KEY_LENGTH} characters`,
      );
    }
    trace.key = key;

    let invocation = new InvocationTransaction(deadline, settings.deadlineMarginMs, signal);
    const generation = pool?.generation;
    const sql = pool ? pool.sql : (options.sql as Sql);
    /** After an invocation that lost its connection, the next one starts on a fresh pool. */
    const recover = (error: unknown) => {
      if (pool && generation !== undefined && (invocation.lost || isConnectionFailure(error)))
        pool.replace(generation);
    };
    // An event waiting in this invocation for a lower one of its chain (order.ts) waits at most
    // half of the time left: the other half is the handler's.
    const waitUntil = Date.now() + (deadline - settings.deadlineMarginMs - Date.now()) / 2;

    if (signal) {
      try {
        await trace.attempt(sql, invocation);
      } catch (error) {
        await invocation.abandon(error);
        recover(error);
        throw translateSchemaError(error);
      }
    }

    let decision: Decision;
    let mayWait = true;
    for (;;) {
      try {
        decision = await invocation.open(
          sql,
          (tx) => decide(tx, settings, delivery, key, event, mayWait && Date.now() < waitUntil, replay),
          (d) => 'apply' in d,
        );
        break;
      } catch (error) {
        if (error instanceof WaitingForLowerEvent) {
          // Rolled back, so that the lower event can take the chain's lock; decided again after.
          await invocation.abandon(error);
          invocation = new InvocationTransaction(deadline, settings.deadlineMarginMs, signal);
          const next = invocation;
          // A wait that ran out decides next time without waiting again.
          mayWait = await waitForChain(sql, error, waitUntil, (p) => next.bounded(p)).catch(
            async (e: unknown) => {
              await next.abandon(e);
              recover(e);
              throw translateSchemaError(e);
            },
          );
          continue;
        }
        if (error instanceof InboxGapError) {
          // Remembered outside the transaction, which the gap rolled back.
          await invocation.outside(rememberGap(sql, error)).catch((e: unknown) => {
            recover(e);
            throw translateSchemaError(e);
          });
          // A designed retry: counted apart, so that the errors alarm does not page for it.
          metric(InboxMetricName.GapRetry, { eventId: metadata.eventId });
        }
        await invocation.abandon(error);
        recover(error);
        // Only the inbox's own statements ran here, so a missing table or function is its schema.
        throw translateSchemaError(error);
      }
    }

    if ('skip' in decision) {
      invocation.settled();
      if (decision.skip === 'stale') metric(InboxMetricName.Stale);
      if (decision.skip === 'parked' && !decision.again) metric(InboxMetricName.Parked);
      replayed(decision.skip);
      return replay
        ? { inbox: decision.skip, eventId: metadata.eventId, replay: true }
        : { inbox: decision.skip, eventId: metadata.eventId };
    }

    /**
     * After the handler's failure number `parkAfterAttempts`: parks the event holding its aggregate,
     * in a transaction of its own (the handler's rolled back). False when it is not that failure
     * yet, or when parking could not be done in time (the invocation then fails with the handler's
     * error, and its next delivery parks the event before running the handler: order.ts).
     */
    const parkAfterFailure = async (error: unknown, limit: number): Promise<boolean> => {
      try {
        const failures = 1 + (await readHandlerFailures(sql, settings.consumer, metadata.eventId));
        if (failures < limit) return false;
        const e = error as { name?: unknown; message?: unknown };
        const last = `${String(e?.name ?? typeof error)}: ${String(e?.message ?? error)}`;
        const parking = new InvocationTransaction(deadline, settings.deadlineMarginMs, signal);
        await parking.open(
          sql,
          async (tx) => {
            await recordMessage(tx, {
              consumer: settings.consumer,
              key,
              eventId: metadata.eventId,
              source,
              type,
              aggregateType: metadata.aggregateType,
              aggregateId: metadata.aggregateId,
              sequence: delivery.sequence,
              outboxId: delivery.outboxId,
            });
            await markHeld(tx, settings.consumer, key, event, handlerFailureReason(failures, limit, last));
            return true;
          },
          () => false,
        );
        parking.settled();
        return true;
      } catch {
        return false;
      }
    };

    const inboxContext = Object.assign(Object.create(context) as Context, context, {
      inbox: {
        tx: invocation.handle as Tx,
        metadata,
        data,
        type,
        source,
        arrival: decision.apply,
        replay,
      },
    }) as InboxContext<T>;
    let result: R;
    try {
      // The handler's return is awaited no longer than the deadline: past it the invocation rolls
      // back and fails whether or not the handler ever returns.
      result = await invocation.bounded(handler(event, inboxContext));
    } catch (error) {
      await invocation.abandon(error);
      recover(error);
      if (settings.parkAfterAttempts !== undefined && isHandlerFault(error)) {
        trace.handlerFailed = true;
        const parked = await parkAfterFailure(error, settings.parkAfterAttempts);
        if (parked) {
          metric(InboxMetricName.Parked, { eventId: metadata.eventId, reason: 'parkAfterAttempts' });
          replayed('parked');
          return replay
            ? { inbox: 'parked', eventId: metadata.eventId, replay: true }
            : { inbox: 'parked', eventId: metadata.eventId };
        }
      }
      throw error;
    }
    try {
      await invocation.commit();
    } catch (error) {
      recover(error);
      throw error;
    }
    const counted = ARRIVAL_METRIC[decision.apply];
    if (counted) metric(counted);
    // The whole way from the outbox's commit to this one (relay, bus, rule, consumer); the clocks
    // are the database's (occurredAt) and the function's, both NTP-disciplined.
    const lag = secondsSince(metadata.occurredAt);
    if (lag !== undefined)
      metric(InboxMetricName.ConsumerLag, { eventId: metadata.eventId }, { value: lag, unit: 'Seconds' });
    replayed(decision.apply);
    return result;
  };

  const acknowledgeHeartbeat = (event: EventBridgeEvent<string, unknown>): InboxSkip => {
    const metadata = (event.detail as { metadata?: { eventId?: unknown; occurredAt?: unknown } }).metadata;
    const eventId = typeof metadata?.eventId === 'string' ? metadata.eventId : '';
    metric(InboxMetricName.HeartbeatReceived, { eventId });
    const age = typeof metadata?.occurredAt === 'string' ? secondsSince(metadata.occurredAt) : undefined;
    if (age !== undefined) metric(InboxMetricName.HeartbeatAge, { eventId }, { value: age, unit: 'Seconds' });
    return { inbox: 'heartbeat', eventId };
  };

  const one = async (raw: unknown, context: Context, wrapper?: { signal?: AbortSignal }) => {
    const deadline = lambdaDeadline(context);
    // A Custom Event Bus subscriber's WITH_METADATA delivery: the event is its Data.
    const origin = unwrapDelivery(raw);
    const event = origin.event;
    // The monitor's heartbeat: it proves the way here (relay, bus, rule) carries events; counted
    // for the OutboxConsumer's heartbeat alarm, never the handler's, never recorded.
    if (isHeartbeat(event)) return acknowledgeHeartbeat(event);
    const trace = new FailureTrace(settings.consumer, event, deadline);
    try {
      const run = () => invoke(event, context, deadline, abortSignalOf(wrapper), trace, origin);
      return await (span ? span(event, run) : run());
    } catch (error) {
      // Before the error leaves: a wrapper may turn it into a success (see trace.ts).
      await trace.fail(pool ? pool.sql : (options.sql as Sql), error);
      throw error;
    }
  };
  return inEachDelivery(one);
}

/** The monitor's heartbeat event: its Source and DetailType, an object detail. */
function isHeartbeat(event: EventBridgeEvent<string, unknown>): boolean {
  return (
    event?.source === HEARTBEAT_EVENT.source &&
    event['detail-type'] === HEARTBEAT_EVENT.detailType &&
    typeof event.detail === 'object' &&
    event.detail !== null
  );
}

/**
 * Seconds from `iso` to now, to the millisecond, at least 0 (clocks a little apart must not make a
 * negative lag); undefined when `iso` is not a time.
 */
function secondsSince(iso: string): number | undefined {
  const at = Date.parse(iso);
  if (!Number.isFinite(at)) return undefined;
  return Math.max(0, Date.now() - at) / 1000;
}

/**
 * A Lambda handler taking a Custom Event Bus subscriber's payload as an object or as an array
 * (delivery.ts, {@link deliveriesOf}): each element handled by `one` in turn, in the array's
 * order, stopping at the first that fails (the invocation fails; those before it stay recorded and
 * come back as duplicates on the retry). An array's results come back as an array.
 */
function inEachDelivery<A extends unknown[], R>(
  one: (raw: unknown, context: Context, ...rest: A) => Promise<R>,
): (raw: unknown, context: Context, ...rest: A) => Promise<R | R[]> {
  return async (raw, context, ...rest) => {
    const batch = deliveriesOf(raw);
    if (batch === undefined) return one(raw, context, ...rest);
    const results: R[] = [];
    for (const element of batch) results.push(await one(element, context, ...rest));
    return results;
  };
}
