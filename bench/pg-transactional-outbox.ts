/**
 * The pg-transactional-outbox comparison: its polling listener (the library's own table, polling
 * function and indexes, set up with its `DatabaseSetup` SQL) with a message handler that publishes
 * each message with one PutEvents call. One segment per aggregate, as a user keeping per-aggregate
 * order would configure it.
 *
 * Tuned for throughput with the knobs its README documents for the polling listener:
 * `nextMessagesBatchSize` (how many messages are fetched, and so processed, at once: the library
 * keeps that many in flight and fetches more as each one finishes), `nextMessagesPollingIntervalInMs`
 * (the wait when fewer messages than that were found) and the handler pool (each message is handled
 * in a transaction of its own, holding one connection, so the `pg` pool needs one connection per
 * message in flight). {@link PGTO_TUNED} is the best of the grid the full bench profile runs.
 *
 * `node bench/pg-transactional-outbox.ts <n> <budgetMs> '<settings JSON>'` runs it as a process of
 * its own; prints `{"published": n, "ms": run time}`.
 */
import { type EventBridgeClient, PutEventsCommand } from '@aws-sdk/client-eventbridge';
import {
  DatabaseSetup,
  getDefaultLogger,
  getDisabledLogger,
  initializePollingMessageListener,
  type TransactionalMessage,
} from 'pg-transactional-outbox';
import type { Sql } from '../shared/platform/index.ts';
import { createEventBridgeClient } from '../shared/relay/index.ts';

const setup = {
  outboxOrInbox: 'outbox' as const,
  database: 'unused',
  schema: 'pgto',
  table: 'outbox',
  listenerRole: 'unused',
  nextMessagesName: 'next_outbox_messages',
};

/** The throughput settings of the polling listener. */
export interface PgtoSettings {
  /** `nextMessagesBatchSize`: messages fetched and processed at once (library default 5). */
  batchSize: number;
  /** `nextMessagesPollingIntervalInMs`: wait when fewer than a batch were found (default 500). */
  pollingIntervalMs: number;
  /** `pg` pool size of the message handlers (pg's default 10); one connection per message in flight. */
  poolSize: number;
}

/** The library's defaults, as its README lists them (batch 5, 500 ms; pg's pool of 10). */
export const PGTO_DEFAULTS: PgtoSettings = { batchSize: 5, pollingIntervalMs: 500, poolSize: 10 };

/** Tuned for throughput: the best cell of the bench's grid (full profile) at 20 ms bus latency. */
export const PGTO_TUNED: PgtoSettings = { batchSize: 40, pollingIntervalMs: 10, poolSize: 40 };

/** Creates the library's schema (table, polling function, indexes) in the database behind `sql`. */
export async function setUpPgTransactionalOutbox(sql: Sql): Promise<void> {
  await sql.unsafe(DatabaseSetup.dropAndCreateTable(setup));
  await sql.unsafe(DatabaseSetup.createPollingFunction(setup));
  await sql.unsafe(DatabaseSetup.setupPollingIndexes(setup));
}

/** Inserts `n` messages, one aggregate (segment) each. */
export async function seedPgTransactionalOutbox(sql: Sql, n: number): Promise<void> {
  await sql`truncate pgto.outbox`;
  await sql`
    insert into pgto.outbox (id, aggregate_type, aggregate_id, message_type, segment, payload)
    select gen_random_uuid(), 'order', g::text, 'OrderPlaced', g::text, jsonb_build_object('orderId', g, 'total', g * 3)
    from generate_series(1, ${n}) g`;
  await sql`vacuum analyze pgto.outbox`;
}

/** Runs the polling listener until `n` messages were published or `budgetMs` passed; returns how many. */
export async function runPgTransactionalOutbox(
  databaseUrl: string,
  client: EventBridgeClient,
  busName: string,
  n: number,
  budgetMs: number,
  tuning: PgtoSettings = PGTO_TUNED,
): Promise<number> {
  const url = new URL(databaseUrl);
  const dbConfig = {
    host: url.hostname,
    port: Number(url.port || 5432),
    user: decodeURIComponent(url.username),
    password: decodeURIComponent(url.password),
    database: url.pathname.slice(1),
  };
  // The handler pool is a pg Pool built from this config, so `max` sizes it.
  const handlerConfig: typeof dbConfig = Object.assign({ max: tuning.poolSize }, dbConfig);
  let published = 0;
  let finish: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const [shutdown] = initializePollingMessageListener(
    {
      outboxOrInbox: 'outbox',
      dbListenerConfig: dbConfig,
      dbHandlerConfig: handlerConfig,
      settings: {
        dbSchema: 'pgto',
        dbTable: 'outbox',
        nextMessagesFunctionSchema: 'pgto',
        nextMessagesFunctionName: 'next_outbox_messages',
        nextMessagesBatchSize: tuning.batchSize,
        nextMessagesPollingIntervalInMs: tuning.pollingIntervalMs,
        enableMaxAttemptsProtection: false,
        enablePoisonousMessageProtection: false,
      },
    },
    {
      handle: async (message: TransactionalMessage) => {
        await client.send(
          new PutEventsCommand({
            Entries: [
              {
                EventBusName: busName,
                Source: 'bench.orders',
                DetailType: message.messageType,
                Detail: JSON.stringify({
                  metadata: {
                    eventId: message.id,
                    aggregateType: message.aggregateType,
                    aggregateId: message.aggregateId,
                  },
                  data: message.payload,
                }),
              },
            ],
          }),
        );
        published++;
        if (published >= n) finish();
      },
    },
    process.env.PGTO_DEBUG ? getDefaultLogger('pgto') : getDisabledLogger(),
  );
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    done,
    new Promise((r) => {
      timer = setTimeout(r, budgetMs);
    }),
  ]);
  clearTimeout(timer);
  await shutdown();
  return published;
}

if (import.meta.main) {
  const [n, budgetMs, settings] = process.argv.slice(2);
  const tuning: PgtoSettings = settings ? JSON.parse(settings) : PGTO_TUNED;
  const client = createEventBridgeClient();
  const started = performance.now();
  const published = await runPgTransactionalOutbox(
    process.env.DATABASE_URL as string,
    client,
    process.env.EVENT_BUS_NAME ?? 'bench-bus',
    Number(n ?? 1_000),
    Number(budgetMs ?? 10_000),
    tuning,
  );
  const ms = performance.now() - started;
  process.stdout.write(`${JSON.stringify({ published, ms })}\n`);
}
