/**
 * Safety behind a transaction pooler (RDS Proxy, PgBouncer in transaction mode, Supabase's and
 * Neon's poolers): at most one statement in flight per client connection.
 *
 * Why. Behind such a pooler a client connection is bound to a server connection only until the
 * server reports the transaction over (ReadyForQuery, idle). `postgres` pipelines: when every
 * connection of the pool is busy, it writes the next query on a busy one. With `prepare: false`
 * (which poolers need), a query with parameters goes out in two steps, Parse/Describe/Flush and
 * then Bind/Execute/Sync. Pipelined behind another statement, its first step reaches the server
 * after the earlier statement's ReadyForQuery has unbound the server connection: the pooler drops
 * the answers ("got packet from server when not linked", PgBouncer issue #759) and the query waits
 * for ever, or another client's answer arrives in its place. Reproduced by the rehearsal: a pool of
 * one connection running four statements at once hung in 11 rounds out of 11 through PgBouncer 1.18.
 *
 * How. A counting gate with as many slots as the pool has connections: an autocommit statement
 * holds a slot from the moment it is written until the server settles it, and a transaction
 * (`begin`) or a reserved connection (`reserve`) holds one until it ends. With every slot held, the
 * next statement waits in the gate instead of being pipelined. Statements inside a transaction are
 * not gated: the pooler keeps a transaction on one server connection, so pipelining there is safe.
 * Cursors (`.cursor()`) are not supported through the gate.
 */
import type postgres from 'postgres';

type Sql = postgres.Sql;

/** A counting semaphore; waiters are served in arrival order. */
class Gate {
  private free: number;
  private readonly waiting: (() => void)[] = [];
  constructor(slots: number) {
    this.free = slots;
  }
  acquire(): Promise<void> {
    return new Promise((resolve) => this.enter(resolve));
  }
  /**
   * Calls `granted` with a slot, at once or when one is released; returns a withdrawal that takes
   * a waiter out of the line (true) or does nothing once it was granted (false).
   */
  enter(granted: () => void): () => boolean {
    if (this.free > 0) {
      this.free--;
      granted();
      return () => false;
    }
    this.waiting.push(granted);
    return () => {
      const at = this.waiting.indexOf(granted);
      if (at === -1) return false;
      this.waiting.splice(at, 1);
      return true;
    };
  }
  /**
   * Hands the slot on a microtask later, so that the continuation of the statement that just
   * settled runs before the next one is written; the next waiter is taken out of the line only
   * then, so a withdrawal until that moment still finds it there.
   */
  release(): void {
    queueMicrotask(() => {
      const next = this.waiting.shift();
      if (next) next();
      else this.free++;
    });
  }
  /** A release that does nothing after its first call. */
  releaser(): () => void {
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.release();
    };
  }
}

/**
 * The parts of a porsager Query that the gate touches (instance fields set by its constructor).
 * `handler` is the driver's function that sends the query; it carries the driver's settings and,
 * from postgres 4 on, the `cancel` that `query.cancel()` and an AbortSignal call, so its
 * replacement keeps them. `resolve` and `reject` are prototype methods from postgres 4 on (they
 * read `this`), instance functions in 3: both are called as methods of the query.
 */
interface GatedQuery {
  handler: ((query: GatedQuery) => void) & { cancel?: (query: GatedQuery) => Promise<unknown> };
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
  cancelled: unknown;
}

function isQuery(value: unknown): value is GatedQuery {
  return value instanceof Promise && typeof (value as Partial<GatedQuery>).handler === 'function';
}

/** The driver's error for a cancelled statement, as postgres 3 gives it: SQLSTATE 57014. */
function cancelledWhileWaiting(): Error {
  return Object.assign(new Error('canceling statement due to user request'), { code: '57014' });
}

/**
 * Returns `sql` with at most `connections` statements or transactions in flight, one per
 * connection, so that nothing is ever pipelined through a transaction pooler.
 * @param connections the pool's `max`
 */
export function oneStatementPerConnection(sql: Sql, connections: number): Sql {
  const gate = new Gate(connections);
  /** The statements waiting in the gate, each with its withdrawal. */
  const waiting = new WeakMap<GatedQuery, () => boolean>();
  const gated = (query: GatedQuery): GatedQuery => {
    const write = query.handler;
    const handler = (q: GatedQuery) => {
      const withdraw = gate.enter(() => {
        waiting.delete(q);
        const release = gate.releaser();
        // Cancelled while it waited: it was never sent (postgres 3 rejected it when cancelled).
        if (q.cancelled) return release();
        const resolve = q.resolve.bind(q);
        const reject = q.reject.bind(q);
        // Settle first, then free the slot: the caller's continuation runs before the next
        // statement is written (both happen after the server's ReadyForQuery was read).
        q.resolve = (value) => {
          resolve(value);
          release();
        };
        q.reject = (error) => {
          reject(error);
          release();
        };
        write(q);
      });
      waiting.set(q, withdraw);
    };
    // postgres 4 cancels through the handler: a statement still in the gate is taken out of the
    // line and rejected here (the driver never saw it); one written is the driver's to cancel.
    const cancel = (q: GatedQuery): Promise<unknown> => {
      if (waiting.get(q)?.()) {
        waiting.delete(q);
        q.cancelled = true;
        q.reject(cancelledWhileWaiting());
        return Promise.resolve();
      }
      return write.cancel ? write.cancel(q) : Promise.resolve();
    };
    query.handler = Object.assign(handler, write, { cancel });
    return query;
  };
  const wrapQueries = <F extends (...args: never[]) => unknown>(fn: F): F =>
    ((...args: Parameters<F>) => {
      const result = fn(...args);
      return isQuery(result) ? gated(result) : result;
    }) as F;

  return new Proxy(sql, {
    apply(target, thisArg, args) {
      const result = Reflect.apply(target, thisArg, args);
      return isQuery(result) ? gated(result) : result;
    },
    get(target, property, receiver) {
      const value = Reflect.get(target, property, receiver);
      if (property === 'unsafe' || property === 'file') return wrapQueries(value.bind(target));
      if (property === 'begin') {
        return async (...args: unknown[]) => {
          await gate.acquire();
          try {
            return await (value as (...a: unknown[]) => Promise<unknown>).apply(target, args);
          } finally {
            gate.release();
          }
        };
      }
      if (property === 'reserve') {
        return async () => {
          await gate.acquire();
          const release = gate.releaser();
          try {
            const reserved = await (value as () => Promise<postgres.ReservedSql>).apply(target);
            const giveBack = reserved.release;
            reserved.release = () => {
              giveBack();
              release();
            };
            return reserved;
          } catch (error) {
            release();
            throw error;
          }
        };
      }
      return value;
    },
  }) as Sql;
}
