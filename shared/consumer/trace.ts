/**
 * The failure trace of one invocation (`inbox_failed`, migration 019): nothing is acknowledged
 * without a trace, whatever wraps the inbox (docs/consumer-operations.md#failed-events).
 *
 * A wrapper can turn the inbox's failure into a success: a middy `onError` that returns a value,
 * or middy's `timeoutEarlyResponse`, which answers for the handler right after aborting its
 * signal. Lambda then sees a success, retries nothing, and the event, rolled back, would be gone.
 * So:
 * - every failure writes its trace, outside the rolled-back transaction, before the error leaves
 *   the inbox's handler ({@link FailureTrace.fail}), so that an `onError` that swallows the error
 *   still leaves it;
 * - under a wrapper that passes an AbortSignal (middy), the trace is written before the transaction
 *   begins ({@link FailureTrace.attempt}), as an attempt not yet finished: the wrapper answers in
 *   the same turn of the event loop as its abort, and Lambda may freeze the container before
 *   anything written after the abort reaches the database. The transaction's first statement
 *   deletes the row, so it goes if and only if the attempt commits.
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import type { Sql } from '../platform/db.ts';
import type { InvocationTransaction } from './invocation.ts';
import { recordFailure, UNFINISHED_ATTEMPT } from './sql/index.ts';

/** The longest error message kept in a trace, characters. */
const MAX_MESSAGE = 4_000;

/** The AbortSignal a wrapper passes as the handler's third argument (`{ signal }`), if any. */
export function abortSignalOf(wrapper: unknown): AbortSignal | undefined {
  const signal = (wrapper as { signal?: unknown } | null | undefined)?.signal;
  return signal instanceof AbortSignal ? signal : undefined;
}

/** The trace of one invocation: its event, its key once computed, and its attempt row. */
export class FailureTrace {
  /** The deduplication key, set once the inbox computed it. */
  key: string | undefined;
  /** Set when the failure is the handler's (counted towards `parkAfterAttempts`). */
  handlerFailed = false;
  readonly #consumer: string;
  readonly #event: EventBridgeEvent<string, unknown>;
  /**
   * `metadata.eventId` when it is a readable one, else `eventbridge:` and EventBridge's own `id`:
   * an event the inbox could not read leaves a trace too.
   */
  readonly #eventId: string;
  readonly #lambdaDeadline: number;
  /** The attempt row's write, once sent; resolves true when it was written. */
  #attempt: Promise<boolean> | undefined;

  /** @param lambdaDeadlineAt epoch ms when Lambda ends the invocation: no write waits past it */
  constructor(consumer: string, event: EventBridgeEvent<string, unknown>, lambdaDeadlineAt: number) {
    this.#consumer = consumer;
    this.#event = event ?? ({} as EventBridgeEvent<string, unknown>);
    const id = (event?.detail as { metadata?: { eventId?: unknown } } | undefined)?.metadata?.eventId;
    this.#eventId =
      typeof id === 'string' && id.trim() !== '' && id.length <= 512
        ? id
        : `eventbridge:${typeof event?.id === 'string' ? event.id : randomUUID()}`;
    this.#lambdaDeadline = lambdaDeadlineAt;
  }

  #write(sql: Sql, errorName: string, errorMessage: string, counted: boolean) {
    const r = { consumer: this.#consumer, eventId: this.#eventId, key: this.key, event: this.#event };
    return recordFailure(sql, { ...r, errorName, errorMessage, handlerFailure: this.handlerFailed }, counted);
  }

  /**
   * Writes the attempt row before the transaction begins ({@link UNFINISHED_ATTEMPT}), within the
   * invocation's bounds: its deadline or the signal's abort end the wait, not the write.
   * @throws {InboxAbortedError} when the deadline or the signal came first
   * @throws the database's error
   */
  async attempt(sql: Sql, invocation: InvocationTransaction): Promise<void> {
    const write = this.#write(
      sql,
      UNFINISHED_ATTEMPT,
      'began under an AbortSignal (middy), reported no outcome: the wrapper answered for it, or the container froze; not committed',
      false,
    );
    this.#attempt = write.then(
      () => true,
      () => false,
    );
    await invocation.bounded(write);
  }

  /**
   * Records the failure, outside any transaction, before the Lambda deadline at the latest. Never
   * throws: the invocation fails with its own error, and a trace that could not be written is
   * logged (stderr, one JSON line, without the payload).
   */
  async fail(sql: Sql, error: unknown): Promise<void> {
    const e = (error ?? {}) as { name?: unknown; message?: unknown };
    const name = typeof e.name === 'string' ? e.name : typeof error;
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('Lambda deadline')), this.#lambdaDeadline - Date.now());
    });
    try {
      // After the attempt row, never beside it: the later write must be the last one.
      const counted = this.#attempt ? await Promise.race([this.#attempt, late]) : false;
      const message = String(typeof e.message === 'string' ? e.message : error).slice(0, MAX_MESSAGE);
      await Promise.race([this.#write(sql, name, message, counted), late]);
    } catch (failure) {
      const f = failure as { message?: unknown; code?: unknown };
      process.stderr.write(
        `${JSON.stringify({
          level: 'ERROR',
          message: 'inbox: failure trace (inbox_failed) not written',
          consumer: this.#consumer,
          eventId: this.#eventId,
          error: name,
          cause: { message: f?.message, code: f?.code },
        })}\n`,
      );
    } finally {
      clearTimeout(timer);
    }
  }
}
