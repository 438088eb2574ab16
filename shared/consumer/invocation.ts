/**
 * One consumer invocation's transaction: all or nothing (docs/guarantees.md#what-is-promised).
 *
 * The transaction is porsager's own `sql.begin`, held open while the handler runs: the callback
 * records the event, hands the handler a guarded handle, and waits for the middleware to say
 * commit or roll back. `sql.begin` gives three things a reserved connection with a hand-written
 * `begin` did not:
 * - a statement that failed inside the transaction fails the COMMIT even if the handler caught it
 *   (the driver remembers the first uncaught error and rolls back instead);
 * - the transaction fails as soon as its connection closes (the driver races the callback against
 *   the connection's close);
 * - a connection that died goes back to the pool's closed queue, to be reconnected on demand, and
 *   never into its open queue as `release()` does with a dead reserved connection
 *   (porsager/postgres#1199: every later query on the pool then fails with CONNECTION_CLOSED).
 *
 * What `sql.begin` does not do, this module adds:
 * - **A guard on the handler's handle.** The driver sends a transaction's statements to its
 *   connection object even after the transaction is over, and that object is reconnected to serve
 *   queued pool queries or handed to the next transaction. A statement the handler issues after
 *   the invocation gave up, lost its connection or finished would then run in autocommit, or inside
 *   someone else's transaction. Every statement of the handler is checked when it is sent, and
 *   refused with {@link InboxAbortedError} once the invocation's transaction is over.
 * - **A deadline.** The invocation gives up `deadlineMarginMs` before the Lambda deadline: it
 *   refuses the handler's further statements, cancels the one still running, and rolls back,
 *   whether or not the handler returns. Every wait of the middleware (the connection, the
 *   bookkeeping, the COMMIT) ends by then. An AbortSignal from a wrapper (middy's, when its
 *   `timeoutEarlyInMillis` fires) ends it the same way, at once: the wrapper answers right after
 *   aborting, and the transaction must not outlive the answer in a frozen container.
 * - **A check before COMMIT** that the session is still the one the event was recorded in, in the
 *   same transaction, and not aborted: a COMMIT that would not commit fails the invocation.
 */
import type postgres from 'postgres';
import { isConnectionFailure } from '../platform/connection-errors.ts';
import type { Sql, Tx } from '../platform/db.ts';
import { OutboxError } from '../platform/errors.ts';
import {
  type DbTransactionIdentity,
  readAssignedTransactionIdentity,
  readTransactionIdentity,
} from './sql/index.ts';

/** Why an invocation's transaction stopped taking statements. */
export type InboxAbortReason = 'deadline' | 'signal' | 'connection' | 'finished';

/**
 * The invocation's transaction is over, so a statement was refused or the invocation failed:
 * - `deadline`: the invocation reached `deadlineMarginMs` before its Lambda deadline and rolled back;
 * - `signal`: the wrapper's AbortSignal aborted (middy's early timeout) and it rolled back;
 * - `connection`: the connection was lost and the transaction with it;
 * - `finished`: the handler had already returned or failed (a statement it did not await).
 * Nothing of the invocation was committed, except for `finished` after a COMMIT that succeeded.
 */
export class InboxAbortedError extends OutboxError {
  override name = 'InboxAbortedError';
  readonly reason: InboxAbortReason;
  constructor(reason: InboxAbortReason, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.reason = reason;
  }
}

/**
 * The transaction did not commit although the handler succeeded: a statement in it had failed
 * (even one the handler caught; `cause` is that statement's error, with its SQLSTATE `code`), or
 * the COMMIT itself failed (deferred constraint, serialisation failure, lost connection). Nothing
 * was committed, unless the connection was lost during the COMMIT, when the outcome is unknown: the
 * retry then finds the event recorded and acknowledges it as a duplicate.
 */
export class InboxCommitError extends OutboxError {
  override name = 'InboxCommitError';
}

/** A context without a Lambda clock (tests, `npm start`) gets this long, ms. */
export const FALLBACK_INVOCATION_MS = 60_000;

/**
 * The part of porsager's `Query` the guard relies on: `handler` sends it when it is executed. The
 * handler carries the driver's settings (`debug`; from postgres 4 on also `options`, which building
 * the query reads, and `cancel`, which `query.cancel()` calls), so a wrapper copies them all
 * (`Object.assign(wrapper, send)`): with `debug` alone, postgres 4 failed every statement.
 */
interface SendableQuery {
  handler: ((query: SendableQuery) => unknown) & { debug?: unknown };
  reject(error: unknown): void;
  cancel(): unknown;
}

function isSendable(value: unknown): value is SendableQuery & Promise<unknown> {
  return (
    value instanceof Promise &&
    typeof (value as Partial<SendableQuery>).handler === 'function' &&
    typeof (value as Partial<SendableQuery>).reject === 'function' &&
    typeof (value as Partial<SendableQuery>).cancel === 'function'
  );
}

/** The Lambda deadline as epoch ms, from `getRemainingTimeInMillis`, else the fallback. */
export function lambdaDeadline(context: unknown, now = Date.now()): number {
  const remaining = (context as { getRemainingTimeInMillis?: () => number } | undefined)
    ?.getRemainingTimeInMillis;
  return now + (typeof remaining === 'function' ? remaining() : FALLBACK_INVOCATION_MS);
}

/**
 * The transaction of one invocation. `open` starts it and runs the bookkeeping; the handler then
 * uses `handle`; `commit` or `abandon` ends it. Each is safe to call once in that order; `abandon`
 * after `commit`, or twice, does nothing.
 */
export class InvocationTransaction {
  /** The handler's guarded handle; set once `open` resolved without a skip. */
  handle: Tx | undefined;
  /** Set when the handler's statements must be refused. */
  #ended: InboxAbortedError | undefined;
  #lost = false;
  #settled = false;
  #tx: Tx | undefined;
  #identity: DbTransactionIdentity | undefined;
  #begin: Promise<unknown> | undefined;
  /** The handler's statements sent and not yet answered. */
  readonly #inFlight = new Set<SendableQuery>();
  readonly #outcome = Promise.withResolvers<void>();
  readonly #giveUp = Promise.withResolvers<never>();
  /** Resolved when the connection closed under the transaction. */
  readonly #closed = Promise.withResolvers<void>();
  readonly #lambdaDeadline: number;
  readonly #timer: NodeJS.Timeout;
  readonly #signal: AbortSignal | undefined;
  readonly #onAbort = () => this.#abort();

  /**
   * @param lambdaDeadlineAt epoch ms when Lambda ends the invocation
   * @param marginMs how long before it to give up and roll back
   * @param signal a wrapper's AbortSignal (middy passes one): its abort ends the transaction as
   *   the deadline does, with {@link InboxAbortedError} `signal`
   */
  constructor(lambdaDeadlineAt: number, marginMs: number, signal?: AbortSignal) {
    this.#lambdaDeadline = lambdaDeadlineAt;
    // Settled only by the middleware; these handlers keep an early settlement from being unhandled.
    this.#outcome.promise.catch(() => {});
    this.#giveUp.promise.catch(() => {});
    this.#timer = setTimeout(
      () => this.#reachDeadline(),
      Math.max(0, lambdaDeadlineAt - marginMs - Date.now()),
    );
    this.#timer.unref();
    this.#signal = signal;
    if (signal?.aborted) this.#abort();
    else signal?.addEventListener('abort', this.#onAbort, { once: true });
  }

  /** True once the connection closed under the transaction. */
  get lost(): boolean {
    return this.#lost;
  }

  /** Why the handler's statements are refused, if they are; the guard asks before each one. */
  get ended(): InboxAbortedError | undefined {
    return this.#ended;
  }

  /**
   * Begins the transaction and runs `record` in it: the inbox's own statements, each cancelled at
   * the deadline like the handler's. When `keepOpen` says no (the event is skipped), the
   * transaction is committed at once and `open` resolves once it has; otherwise it stays open for
   * the handler ({@link handle}) and `open` resolves at once.
   * @throws {InboxAbortedError} `deadline` when the deadline came first (nothing is committed)
   * @throws whatever `record` or the database threw (the transaction is rolled back)
   */
  async open<R>(sql: Sql, record: (tx: Tx) => Promise<R>, keepOpen: (decided: R) => boolean): Promise<R> {
    const ready = Promise.withResolvers<R>();
    this.#begin = sql.begin(async (raw) => {
      try {
        this.#tx = raw;
        const tx = tracked(raw, this);
        if (this.#ended) throw this.#ended;
        const decided = await record(tx);
        // Given up meanwhile: not even a skip may commit after the invocation gave up.
        if (this.#ended) throw this.#ended;
        if (!keepOpen(decided)) return { decided };
        this.#identity = await readTransactionIdentity(tx);
        this.handle = guard(raw, this);
        ready.resolve(decided);
        await this.#outcome.promise;
        return undefined;
      } catch (error) {
        // The driver answers a callback that fails by sending ROLLBACK on the same connection
        // object. When the connection was lost, that object may already serve another session:
        // leave the callback pending instead (the transaction died with its session).
        if (await this.#connectionLost(error)) return new Promise<never>(() => {});
        throw error;
      } finally {
        this.#settled = true;
      }
    });
    this.#begin.then(
      (result) => {
        this.#end('finished', 'the invocation has finished');
        // A skip committed: its decision. (After a commit of the handler's work `ready` had
        // resolved long before, and this changes nothing.)
        if (result) ready.resolve((result as { decided: R }).decided);
      },
      (error: unknown) => {
        // The driver rejects a begin whose callback is still running only when the connection closed.
        if (!this.#settled && this.#tx !== undefined) {
          this.#lost = true;
          this.#closed.resolve();
        }
        this.#end(
          this.#lost ? 'connection' : 'finished',
          this.#lost
            ? 'the connection was lost, and the transaction with it; nothing of this invocation was committed'
            : 'the invocation has failed and was rolled back',
          error,
        );
        ready.reject(error);
      },
    );
    return Promise.race([ready.promise, this.#giveUp.promise]);
  }

  /**
   * Commits the handler's writes with the inbox record.
   * @throws {InboxAbortedError} when the deadline or a lost connection ended the transaction first
   * @throws {InboxCommitError} when the transaction did not commit
   */
  async commit(): Promise<void> {
    try {
      if (this.#ended) {
        await this.#rolledBack();
        throw this.#ended;
      }
      // From here on the handler's statements are refused: nothing may slip in before the COMMIT.
      this.#end('finished', 'the handler had returned; a statement it did not await was refused');
      try {
        await this.bounded(this.#checkBeforeCommit());
      } catch (error) {
        if (error instanceof InboxAbortedError) throw error;
        this.#outcome.reject(error);
        // The driver rethrows the statement that failed first: the one the handler caught.
        const cause = await this.bounded(this.#begin as Promise<unknown>).then(
          () => error,
          (e: unknown) => (e instanceof InboxAbortedError ? error : e),
        );
        if (cause instanceof InboxCommitError) throw cause;
        throw new InboxCommitError(
          `the transaction could not commit${describe(cause)}; nothing of this invocation was committed`,
          { cause },
        );
      }
      this.#outcome.resolve();
      try {
        await this.bounded(this.#begin as Promise<unknown>);
      } catch (error) {
        if (error instanceof InboxAbortedError) throw error;
        throw new InboxCommitError(
          `COMMIT failed${describe(error)}; nothing was committed, unless the connection was lost during the COMMIT (the retry then finds the event recorded)`,
          { cause: error },
        );
      }
    } finally {
      this.#finishTimer();
    }
  }

  /** The transaction of a skipped event committed in {@link open}: nothing is left to wait for. */
  settled(): void {
    this.#finishTimer();
  }

  /** Rolls back (the handler or a later middleware failed) and waits for it, within the deadline. */
  async abandon(reason: unknown): Promise<void> {
    this.#end('finished', 'the invocation has failed and was rolled back', reason);
    this.#outcome.reject(reason);
    await this.#rolledBack();
    this.#finishTimer();
  }

  #end(reason: InboxAbortReason, message: string, cause?: unknown): void {
    this.#ended ??= new InboxAbortedError(reason, message, cause === undefined ? undefined : { cause });
  }

  #reachDeadline(): void {
    this.#stop(
      new InboxAbortedError(
        'deadline',
        'the invocation reached its deadline (deadlineMarginMs before the Lambda timeout): its transaction was rolled back, or, if the COMMIT had been sent, its outcome is unknown (the retry then finds the event recorded); its later statements are refused',
      ),
    );
  }

  #abort(): void {
    this.#stop(
      new InboxAbortedError(
        'signal',
        "the wrapper's AbortSignal aborted the invocation (e.g. middy's timeoutEarlyInMillis over deadlineMarginMs): rolled back as at the deadline",
        { cause: this.#signal?.reason },
      ),
    );
  }

  #stop(error: InboxAbortedError): void {
    this.#ended ??= error;
    // The ROLLBACK queues behind a statement of the handler that is still running (a lock wait, a
    // slow query): cancel it, so that the transaction ends before the invocation does, rather than
    // stay open, holding its locks, while the container is frozen. A cancel that comes too late
    // lands on an idle session and is ignored by the server.
    for (const query of this.#inFlight) Promise.resolve(query.cancel()).catch(noop);
    this.#outcome.reject(error);
    this.#giveUp.reject(error);
  }

  /** Called by the guard for each statement of the handler that it sends. */
  sent(query: SendableQuery & Promise<unknown>): void {
    this.#inFlight.add(query);
    const done = () => this.#inFlight.delete(query);
    query.then(done, done);
  }

  /** The session, transaction and its health are the ones the event was recorded in. */
  async #checkBeforeCommit(): Promise<void> {
    const tx = tracked(this.#tx as Tx, this);
    // Fails with 25P02 when a statement failed in the transaction (even one the handler caught).
    const now = await readAssignedTransactionIdentity(tx);
    if (!now || now.pid !== this.#identity?.pid || now.xid !== this.#identity?.xid) {
      throw new InboxCommitError(
        `the session is no longer the transaction the event was recorded in (backend ${this.#identity?.pid}, transaction ${this.#identity?.xid}; now ${now?.pid}, ${now?.xid})`,
      );
    }
  }

  /**
   * True when the connection closed under the transaction. The driver rejects the statement in
   * flight and then closes the connection, in the same turn of the event loop or the next few, and
   * rejects the begin after that: wait one turn, or up to a second when `error` says the
   * connection is going away.
   */
  async #connectionLost(error: unknown): Promise<boolean> {
    if (this.#lost) return true;
    let timer: NodeJS.Timeout | undefined;
    const turn = new Promise((resolve) => {
      if (isConnectionFailure(error)) timer = setTimeout(resolve, 1_000).unref();
      else setImmediate(resolve);
    });
    await Promise.race([this.#closed.promise, turn]);
    clearTimeout(timer);
    return this.#lost;
  }

  /** Waits for the ROLLBACK (or the lost connection) until the Lambda deadline at the latest. */
  async #rolledBack(): Promise<void> {
    if (!this.#begin) return;
    const hard = new Promise<void>((resolve) => {
      const t = setTimeout(resolve, Math.max(0, this.#lambdaDeadline - Date.now()));
      t.unref();
      this.#begin?.finally(() => clearTimeout(t)).catch(() => {});
    });
    await Promise.race([this.#begin.then(noop, noop), hard]);
  }

  /** `promise`, or {@link InboxAbortedError} `deadline` when the invocation gives up first. */
  bounded<T>(promise: Promise<T>): Promise<T> {
    return Promise.race([promise, this.#giveUp.promise]);
  }

  /**
   * Runs one of the middleware's statements outside the transaction (on the pool): cancelled at
   * the deadline like every other, and given up on then.
   */
  outside<T>(query: Promise<T>): Promise<T> {
    if (isSendable(query)) {
      const send = query.handler;
      query.handler = Object.assign((q: SendableQuery) => {
        const result = send(q);
        this.sent(query);
        return result;
      }, send);
    }
    return this.bounded(query);
  }

  #finishTimer(): void {
    clearTimeout(this.#timer);
    this.#signal?.removeEventListener('abort', this.#onAbort);
  }
}

const noop = () => {};

function describe(error: unknown): string {
  const e = error as { code?: unknown; message?: unknown } | undefined;
  if (!e) return '';
  const code = typeof e.code === 'string' ? ` ${e.code}` : '';
  return ` (${String(e.message ?? e)}${code ? `,${code}` : ''})`;
}

/**
 * The handler's view of the transaction: the same `TransactionSql`, with every statement checked
 * when it is sent (not when it is built: porsager sends a query when it is first awaited). The
 * check wraps the query's `handler`, the one function through which porsager sends every query
 * (awaited, `.execute()`, `.cursor()`, `.forEach()`); fragments built for interpolation are never
 * sent on their own, so wrapping them is harmless.
 */
function guard(tx: Tx, run: InvocationTransaction): Tx {
  const check = <Q>(query: Q): Q => {
    if (!isSendable(query)) return query;
    const send = query.handler;
    const checked = Object.assign((q: SendableQuery) => {
      const refused = run.ended;
      if (refused) return q.reject(refused);
      const result = send(q);
      run.sent(query);
      return result;
    }, send);
    query.handler = checked;
    return query;
  };
  return new Proxy(tx, {
    apply(target, thisArg, args) {
      return check(Reflect.apply(target, thisArg, args));
    },
    get(target, property, receiver) {
      switch (property) {
        case 'unsafe':
        case 'file':
          return (...args: unknown[]) =>
            check((Reflect.get(target, property, receiver) as (...a: unknown[]) => unknown)(...args));
        case 'notify':
          return (channel: string, payload: string) =>
            check(target`select pg_notify(${channel}, ${String(payload)})`);
        case 'savepoint':
          return (...args: unknown[]) => savepoint(target, run, args);
        case 'prepare':
          return () => {
            throw new OutboxError(
              'prepare (two-phase commit) is not available in an inbox transaction: the middleware commits it',
            );
          };
        default:
          return Reflect.get(target, property, receiver);
      }
    },
  });
}

/**
 * The middleware's own view of the transaction: every statement is registered when it is sent, so
 * that the deadline cancels a bookkeeping statement that waits (a lock held by another
 * transaction) as it does the handler's, instead of letting it run to the Lambda timeout.
 */
function tracked(tx: Tx, run: InvocationTransaction): Tx {
  return new Proxy(tx, {
    apply(target, thisArg, args) {
      const query = Reflect.apply(target, thisArg, args);
      if (!isSendable(query)) return query;
      const send = query.handler;
      query.handler = Object.assign((q: SendableQuery) => {
        const result = send(q);
        run.sent(query);
        return result;
      }, send);
      return query;
    },
  });
}

/** `savepoint(fn)`, `savepoint(name, fn)` or savepoint`…`, with the inner handle guarded too. */
function savepoint(tx: Tx, run: InvocationTransaction, args: unknown[]): Promise<unknown> {
  const refused = run.ended;
  if (refused) return Promise.reject(refused);
  const [first, ...rest] = args;
  if (Array.isArray((first as TemplateStringsArray | undefined)?.raw)) {
    return tx.savepoint((inner) =>
      (guard(inner, run) as unknown as (...a: unknown[]) => unknown)(first, ...rest),
    );
  }
  const named = typeof first === 'string';
  const fn = (named ? rest[0] : first) as (inner: Tx) => unknown;
  const wrapped = (inner: postgres.TransactionSql) => fn(guard(inner, run));
  return named ? tx.savepoint(first, wrapped) : tx.savepoint(wrapped);
}
