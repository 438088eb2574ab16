/**
 * The pg-transactional-outbox comparison: its polling listener (the library's own table, polling
 * function and indexes, set up with its `DatabaseSetup` SQL) with a message handler that publishes
 * each message with one PutEvents call. One segment per aggregate, as a user keeping per-aggregate
 * order would configure it; batch size 10 and a 100 ms polling interval (its defaults are 5 and
 * 500 ms, which would only make it slower).
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

const setup = {
  outboxOrInbox: 'outbox' as const,
  database: 'unused',
  schema: 'pgto',
  table: 'outbox',
  listenerRole: 'unused',
  nextMessagesName: 'next_outbox_messages',
};

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
  await sql`analyze pgto.outbox`;
}

/** Runs the polling listener until `n` messages were published or `budgetMs` passed; returns how many. */
export async function runPgTransactionalOutbox(
  databaseUrl: string,
  client: EventBridgeClient,
  busName: string,
  n: number,
  budgetMs: number,
): Promise<number> {
  const url = new URL(databaseUrl);
  const dbConfig = {
    host: url.hostname,
    port: Number(url.port || 5432),
    user: decodeURIComponent(url.username),
    password: decodeURIComponent(url.password),
    database: url.pathname.slice(1),
  };
  let published = 0;
  let finish: () => void = () => {};
  const done = new Promise<void>((resolve) => {
    finish = resolve;
  });
  const [shutdown] = initializePollingMessageListener(
    {
      outboxOrInbox: 'outbox',
      dbListenerConfig: dbConfig,
      dbHandlerConfig: dbConfig,
      settings: {
        dbSchema: 'pgto',
        dbTable: 'outbox',
        nextMessagesFunctionSchema: 'pgto',
        nextMessagesFunctionName: 'next_outbox_messages',
        nextMessagesBatchSize: 10,
        nextMessagesPollingIntervalInMs: 100,
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
  await Promise.race([done, new Promise((r) => setTimeout(r, budgetMs))]);
  await shutdown();
  return published;
}
