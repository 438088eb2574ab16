/**
 * The bench's database and bus: a database of its own on `DATABASE_URL`'s server (else an embedded
 * Postgres), migrated, and the local bus in a process of its own, with the environment an `outbox
 * relay` process needs to reach both.
 */
import postgres from 'postgres';
import { startEmbeddedPostgres } from '../../dev/embedded-postgres.ts';
import { connect, migrate } from '../../shared/platform/index.ts';
import { startBusProcess } from './processes.ts';

/** Creates the database and starts the bus; {@link BenchEnvironment.close} undoes both. */
export async function openEnvironment() {
  const embedded = process.env.DATABASE_URL ? undefined : await startEmbeddedPostgres();
  const serverUrl = process.env.DATABASE_URL ?? (embedded?.url as string);
  const dbName = `outbox_bench_${Date.now()}`;
  const admin = async (statement: string) => {
    const sql = postgres(serverUrl, { max: 1, onnotice: () => {} });
    await sql.unsafe(statement);
    await sql.end();
  };
  await admin(`create database ${dbName}`);
  // The bench's own sessions find the outbox's tables (schema outbox since migration 024) unqualified.
  await admin(`alter database ${dbName} set search_path = public, outbox`);
  const url = new URL(serverUrl);
  url.pathname = `/${dbName}`;
  const dbUrl = url.toString();
  await migrate(dbUrl, { log: () => {} });
  const sql = connect({ url: dbUrl, max: 8, env: {} });
  const bus = await startBusProcess();
  const busEnv = {
    DATABASE_URL: dbUrl,
    EVENT_BUS_NAME: 'bench-bus',
    AWS_ENDPOINT_URL_EVENTBRIDGE: bus.url,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'bench',
    AWS_SECRET_ACCESS_KEY: 'bench',
  };

  /** Empties the outbox and the bus's record. */
  async function reset() {
    await sql`truncate outbox, outbox_aggregate`;
    await bus.reset();
  }
  /**
   * Inserts `n` pending events, `perAggregate` per aggregate (sequences 1, 2, …), in bulk (not
   * through enqueue: this is setup).
   */
  async function seed(n: number, prefix = '', perAggregate = 1) {
    await sql`
      insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload)
      select 'order', ${prefix} || ((g - 1) / ${perAggregate})::text, (g - 1) % ${perAggregate} + 1,
             'OrderPlaced', 'bench.orders', jsonb_build_object('orderId', g, 'total', g * 3)
      from generate_series(1, ${n}) g`;
    await sql`vacuum analyze outbox`;
  }
  /** Closes the pool and the bus, drops the database, stops the embedded server. */
  async function close() {
    await sql.end();
    await bus.close();
    await admin(`drop database if exists ${dbName} with (force)`);
    await embedded?.stop();
  }
  return { serverUrl, dbName, dbUrl, sql, bus, busEnv, reset, seed, close };
}

/** See {@link openEnvironment}. */
export type BenchEnvironment = Awaited<ReturnType<typeof openEnvironment>>;
