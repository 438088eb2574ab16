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
    if (this.free > 0) {
      this.free--;
      return Promise.resolve();
    }
    return new Promise((resolve) => this.waiting.push(resolve));
  }
  release(): void {
    const next = this.waiting.shift();
    if (next) next();
    else this.free++;
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

/** The parts of a porsager Query that the gate touches (instance fields set by its constructor). */
interface GatedQuery {
  handler: (query: GatedQuery) => void;
  resolve: (value: unknown) => void;
  reject: (error: unknown) => void;
  cancelled: unknown;
}

function isQuery(value: unknown): value is GatedQuery {
  return value instanceof Promise && typeof (value as Partial<GatedQuery>).handler === 'function';
}

/**
 * Returns `sql` with at most `connections` statements or transactions in flight, one per
 * connection, so that nothing is ever pipelined through a transaction pooler.
 * @param connections the pool's `max`
 */
export function oneStatementPerConnection(sql: Sql, connections: number): Sql {
  const gate = new Gate(connections);
  const gated = (query: GatedQuery): GatedQuery => {
    const write = query.handler;
    query.handler = (q) => {
      void gate.acquire().then(() => {
        const release = gate.releaser();
        if (q.cancelled) return release(); // cancelled while it waited: it was never sent
        const { resolve, reject } = q;
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
    };
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
