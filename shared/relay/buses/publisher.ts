/**
 * Where a pass puts its events: the {@link Publisher} interface both buses implement, and what
 * they share. A publisher packs a round's events into requests and sends one request, answering one
 * {@link EntryOutcome} per event in request order, never throwing. Two buses
 * (docs/configuration.md#custom-event-bus-eventsv2), a module each:
 *
 * - classic-bus.ts, the classic event bus (the default): PutEvents of
 *   `@aws-sdk/client-eventbridge`, ≤ 10 entries and `maxRequestBytes` per request, the bus named
 *   per entry (`EVENT_BUS_NAME`);
 * - custom-event-bus.ts, the Custom Event Bus (EventsV2, `OUTBOX_EVENT_BUS_ARN`): ≤ 100 entries
 *   per request, the bus by ARN, `SystemMetadata.EventGroupId` = the aggregate (so a FIFO
 *   subscriber receives each aggregate's events in publish order) and `DeduplicationId` = the
 *   event id (so a batch re-sent after a lost answer is dropped by the bus, answered
 *   `DEDUPLICATED`, which counts as published); its client is custom-event-bus-client.ts.
 *
 * Both read an answer entry by entry: PutEvents answers HTTP 200 even when some entries failed
 * (`FailedEntryCount > 0`, an `ErrorCode` on each failed entry, in request order). Ignoring that
 * is the classic silent-loss bug, so the outcome is always per entry, classified the same way on
 * both buses ({@link entryOutcome}, {@link requestFailure}); both clients share the per-attempt
 * timeouts and the rule that an attempt without an answer is not retried inside the call.
 */
import { OutboxConfigError, OutboxError } from '../../platform/index.ts';
import type { ClaimedEvent } from '../types.ts';

/** A request a publisher packed: the events it carries, in order. */
export interface PublishRequest {
  readonly events: readonly ClaimedEvent[];
}

/** Where a pass puts its events; see the module's comment. */
export interface Publisher {
  /** `event-bus` (classic EventBridge) or `custom-event-bus` (EventsV2). */
  readonly kind: 'event-bus' | 'custom-event-bus';
  /** Packs events, in order, into requests within the bus's count and byte limits. */
  pack(events: readonly ClaimedEvent[]): PublishRequest[];
  /**
   * Sends one request (SDK retries included) and returns one outcome per event, in order. Never
   * throws: a request that failed as a whole gives every entry the same retryable outcome.
   * @param signal aborts the call (the entries then fail as back-pressure: `AbortError`)
   * @param answerTimeoutMs how long each attempt waits for the answer, ms (default: the client's)
   */
  put(request: PublishRequest, signal?: AbortSignal, answerTimeoutMs?: number): Promise<EntryOutcome[]>;
  /**
   * Checks once at start-up that requests can be signed (a region and credentials resolve).
   * @throws {OutboxConfigError} naming AWS_REGION or the credentials
   */
  check(): Promise<void>;
}

/** Per-entry error codes that no retry can fix: the row is dead-lettered at once. */
export const PERMANENT_ENTRY_ERRORS: ReadonlySet<string> = new Set([
  'InvalidArgument',
  'MalformedDetail',
  'AccessDeniedException',
  'NotAuthorizedForSourceException',
  'NotAuthorizedForDetailTypeException',
  'ValidationException',
]);

/**
 * What happened to one entry. A failure is `permanent` (dead-letter at once), or retryable; a
 * retryable one is `backPressure` when it is not the entry's own fault — a throttled entry, or a
 * request that failed as a whole on the network, on a timeout or with HTTP 5xx — and then it does
 * not count towards dead-lettering.
 */
export type EntryOutcome =
  | { ok: true }
  | {
      ok: false;
      code: string;
      message: string;
      permanent: boolean;
      throttled: boolean;
      backPressure: boolean;
    };

/**
 * The outcome of one entry of a PutEvents answer (either bus): accepted when it has an `EventId`
 * and no `ErrorCode`, else failed with its code, classified by {@link PERMANENT_ENTRY_ERRORS}.
 */
export function entryOutcome(
  r: { EventId?: string; ErrorCode?: string; ErrorMessage?: string } | undefined,
): EntryOutcome {
  if (r && !r.ErrorCode && r.EventId) return { ok: true };
  const code = r?.ErrorCode ?? 'MissingResult';
  return {
    ok: false,
    code,
    message: r?.ErrorMessage ?? 'no result for this entry in the PutEvents response',
    permanent: PERMANENT_ENTRY_ERRORS.has(code),
    throttled: code === 'ThrottlingException',
    // A throttled entry met the account's rate, not a fault of its own; any other per-entry
    // code (InternalFailure included) is the entry's and counts towards dead-lettering.
    backPressure: code === 'ThrottlingException',
  };
}

/** Whether a call failed as a whole because the request was refused as invalid (HTTP 4xx named `invalidCode`). */
export function refusedAsInvalid(error: unknown, invalidCode: string): boolean {
  const err = error as { name?: string; $metadata?: { httpStatusCode?: number } };
  const status = err.$metadata?.httpStatusCode;
  return status !== undefined && status >= 400 && status < 500 && err.name === invalidCode;
}

/** The outcome of each entry of a call that failed as a whole (either bus). */
export function requestFailure(error: unknown): EntryOutcome {
  {
    const err = error as { name?: string; message?: string; $metadata?: { httpStatusCode?: number } };
    const code = err.name ?? 'Error';
    const status = err.$metadata?.httpStatusCode;
    const throttled = code === 'ThrottlingException' || status === 429;
    // A Custom Event Bus still being created (EventsV2 InvalidStateException, HTTP 409) will take
    // events in a moment: waited out as back-pressure, never counted towards a dead letter.
    const notReady = code === 'InvalidStateException';
    return {
      ok: false as const,
      code,
      message: `${err.message ?? String(error)}${status ? ` (HTTP ${status})` : ''}`,
      // A whole request refused (a bad bus name, a missing permission) is most likely a deployment
      // problem: never a dead letter at once, but retried with backoff (and alarmed on). Entries
      // too large for the bus are refused by enqueue before they are ever stored.
      permanent: false,
      throttled,
      // No HTTP status: the request never got an answer (network, timeout, aborted). 5xx: the
      // service failed. Neither says anything about the entries, so their attempt is given back.
      // Other 4xx still count, so that a refusal that never heals ends in a visible dead letter.
      backPressure: throttled || notReady || status === undefined || status >= 500,
    };
  }
}

/**
 * Whether an outcome says the request got no answer in the time it was given (its attempt timed
 * out, or the call's budget aborted it), as opposed to an answer, even a failed one.
 */
export function isNoAnswer(outcome: EntryOutcome): boolean {
  return !outcome.ok && (outcome.code === 'PutEventsTimeoutError' || outcome.code === 'AbortError');
}

/**
 * Per-attempt timeouts of the EventBridge client, ms. `@smithy/node-http-handler` (4.x) only warns
 * when `requestTimeout` is exceeded unless `throwOnRequestTimeout` is set, and has no socket
 * timeout by default: without both, a bus that accepts the connection and never answers holds
 * the call forever. `requestTimeout` is the default for calls that name none: the relay gives
 * every PutEvents call its own, learned from the bus's answers (`AnswerTimeout`,
 * ../answer-timeout.ts), and the pass also bounds the whole call, SDK retries and their backoff
 * included, with an abort signal.
 */
export const PUT_EVENTS_TIMEOUTS = { connectionTimeout: 2_000, requestTimeout: 3_000 } as const;

/**
 * An attempt got no answer within its timeout. Not retried by the SDK inside the same call: the
 * bus may well have accepted the entries and be answering late, and another attempt with the same
 * timeout would only deliver them again (a bus answering after 4 s against 3 s attempts delivered
 * each event three times per call and marked none). The pass gives the entries back and the next
 * pass sends them with a longer timeout.
 *
 * No `cause`: the SDK's retry classification follows `cause` and would find the transient
 * `TimeoutError` there; the original message is kept in this one's.
 */
export class PutEventsTimeoutError extends OutboxError {
  override name = 'PutEventsTimeoutError';
  constructor(message: string) {
    super(`no answer from the bus within the attempt's timeout (${message})`);
  }
}

/**
 * Records, on one command, the last answer the bus gave among the call's attempts (an error with
 * an HTTP status, such as a 500 the SDK then retried), and returns what to report when the call
 * ends in `error`: that answer when the call's budget then aborted the retry (an `AbortError`),
 * else `error`. A bus that answered 500 is in an outage (back-pressure, the attempt given back);
 * reported as the abort, it read as a bus that never answered, whose entries spend their attempt
 * (pass.ts), and dead-lettered with "raise the lease".
 * @param command a PutEvents command of either client, before it is sent
 */
export function answerOrAbort(command: {
  middlewareStack: { add(middleware: never, options: never): void };
}) {
  let lastAnswer: unknown;
  command.middlewareStack.add(
    ((next: (args: unknown) => Promise<unknown>) => async (args: unknown) => {
      try {
        return await next(args);
      } catch (error) {
        if ((error as { $metadata?: { httpStatusCode?: number } })?.$metadata?.httpStatusCode !== undefined)
          lastAnswer = error;
        throw error;
      }
    }) as never,
    // In the deserialize step, outside the deserializer: it sees each attempt's parsed error.
    { step: 'deserialize', name: 'outboxLastAnswer', priority: 'high' } as never,
  );
  return (error: unknown): unknown =>
    (error as Error)?.name === 'AbortError' && lastAnswer !== undefined ? lastAnswer : error;
}

/** The name of the middleware that turns an attempt's timeout into {@link PutEventsTimeoutError}. */
export const NO_RETRY_AFTER_TIMEOUT_MIDDLEWARE = 'outboxNoRetryAfterTimeout';

/**
 * Adds the middleware that turns an attempt's timeout into {@link PutEventsTimeoutError} (not
 * retried inside the call) to an SDK client's stack: the classic client's and the EventsV2 one's.
 */
export function addNoRetryAfterTimeout(stack: { add(middleware: never, options: never): void }): void {
  // In the deserialize step, below the retry middleware (finalizeRequest): it sees each attempt.
  stack.add(
    ((next: (args: unknown) => Promise<unknown>) => async (args: unknown) => {
      try {
        return await next(args);
      } catch (error) {
        if ((error as Error)?.name === 'TimeoutError')
          throw new PutEventsTimeoutError((error as Error).message);
        throw error;
      }
    }) as never,
    { step: 'deserialize', name: NO_RETRY_AFTER_TIMEOUT_MIDDLEWARE, priority: 'high' } as never,
  );
}

/**
 * Checks at start-up that the client can sign requests: a region and credentials must resolve.
 * Without this, every PutEvents fails before leaving the process and each event is retried (and
 * finally dead-lettered) for what is a deployment problem.
 * @throws {OutboxConfigError} naming AWS_REGION or the credentials
 */
export async function checkEventBridgeClient(client: {
  config: { region(): Promise<string>; credentials(): Promise<unknown> };
}): Promise<void> {
  try {
    await client.config.region();
  } catch (error) {
    throw new OutboxConfigError(
      'AWS_REGION',
      `is required to sign PutEvents requests (${(error as Error).message}): set the bus's region, e.g. ` +
        'AWS_REGION=eu-west-1; for a local bus, `npx outbox bus` (the relay package) prints it',
    );
  }
  try {
    await client.config.credentials();
  } catch (error) {
    throw new OutboxConfigError(
      'AWS credentials',
      `none found (${(error as Error).message}); for the local bus set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY to any value`,
    );
  }
}
