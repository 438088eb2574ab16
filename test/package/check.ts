// Type-checked in a fresh project that installed the packed tarball: every entry point, used as a
// service would. The @ts-expect-error lines prove the types are real (an `any` would not error).

import { OutboxRelay, type OutboxRelayProps } from '@outbox-relay-aws/cdk';
import { type Envelope, type InboxContext, inbox } from '@outbox-relay-aws/consumer';
import {
  connect,
  createEventBridgeClient,
  loadRelaySettings,
  type RelayCounts,
  runRelay,
} from '@outbox-relay-aws/relay';
import { getStatus, type OutboxStatus, prune } from '@outbox-relay-aws/relay/operations';
import { type App, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as rds from 'aws-cdk-lib/aws-rds';
import { drizzle } from 'drizzle-orm/node-postgres';
import type { Kysely } from 'kysely';
import {
  defineEvent,
  type EnqueueResult,
  enqueue,
  enqueueMany,
  OutboxDeadlockError,
  type OutboxEvent,
  OutboxSchemaError,
  OutboxValidationError,
} from 'outbox-relay-aws';
import * as viaDrizzle from 'outbox-relay-aws/drizzle';
import * as viaKysely from 'outbox-relay-aws/kysely';
import * as viaPg from 'outbox-relay-aws/pg';
import type pg from 'pg';
import type postgres from 'postgres';
import { z } from 'zod';

const event: OutboxEvent = {
  type: 'OrderPlaced',
  source: 'shop.orders',
  aggregateType: 'order',
  aggregateId: '8842',
  payload: { total: 120 },
};

export const OrderPlaced = defineEvent({
  type: 'OrderPlaced',
  source: 'shop.orders',
  schema: z.object({ orderId: z.string(), total: z.number() }),
});

interface ShopDatabase {
  orders: { id: string; total: number };
}

export async function produce(
  sql: postgres.Sql,
  pool: pg.Pool,
  db: Kysely<ShopDatabase>,
): Promise<EnqueueResult[]> {
  const one: EnqueueResult = await sql.begin((tx) => enqueue(tx, event));
  const many = await sql.begin((tx) => enqueueMany(tx, [event, { ...event, idempotencyKey: 'k' }]));
  const typed = await sql.begin((tx) =>
    OrderPlaced.enqueue(tx, {
      aggregateType: 'order',
      aggregateId: '1',
      payload: { orderId: '1', total: 2 },
    }),
  );
  // @ts-expect-error the payload must be an object
  await sql.begin((tx) => enqueue(tx, { ...event, payload: 'text' }));
  const wrongTotal = { orderId: '1', total: 'x' };
  await sql.begin((tx) =>
    // @ts-expect-error the typed event's schema wants a number
    OrderPlaced.enqueue(tx, { aggregateType: 'o', aggregateId: '1', payload: wrongTotal }),
  );
  const client = await pool.connect();
  const viaClient: EnqueueResult = await viaPg.enqueue(client, event);
  client.release();
  const viaOrm: EnqueueResult[] = await drizzle(pool).transaction((tx) =>
    viaDrizzle.enqueueMany(tx, [event]),
  );
  const viaBuilder: EnqueueResult = await db.transaction().execute(async (trx) => {
    await trx.insertInto('orders').values({ id: '8842', total: 120 }).execute();
    return viaKysely.enqueue(trx, event);
  });
  // @ts-expect-error a porsager transaction is not a pg client
  await sql.begin((tx) => viaPg.enqueue(tx, event));
  // @ts-expect-error a porsager transaction is not a Kysely executor
  await sql.begin((tx) => viaKysely.enqueue(tx, event));
  return [one, ...many, typed, viaClient, ...viaOrm, viaBuilder];
}

export async function operate(sql: postgres.Sql): Promise<OutboxStatus> {
  await prune(sql, {
    publishedRetentionSeconds: 86_400,
    deadLetterRetentionSeconds: 86_400,
    batchSize: 100,
    timeBudgetMs: 1_000,
  });
  const wrongUnit = {
    publishedRetentionSeconds: '7d',
    deadLetterRetentionSeconds: 1,
    batchSize: 1,
    timeBudgetMs: 1,
  };
  // @ts-expect-error the retention is a number of seconds
  await prune(sql, wrongUnit);
  return getStatus(sql);
}

export function describeError(error: unknown): string {
  if (error instanceof OutboxValidationError) return `bad ${error.field}`;
  if (error instanceof OutboxDeadlockError) return error.retryable ? 'retry' : 'give up';
  if (error instanceof OutboxSchemaError) return `run outbox migrate (${error.sqlState})`;
  return 'other';
}

export function consumer(sql: postgres.Sql) {
  const read = (context: InboxContext): Envelope['metadata'] => context.inbox.metadata;
  const handler = inbox({ sql, consumer: 'billing', order: 'ignore-stale' }, async (_event, context) =>
    read(context),
  );
  return { handler, read };
}

export async function selfHostedRelay(): Promise<RelayCounts> {
  const settings = loadRelaySettings({ EVENT_BUS_NAME: 'orders' });
  const sql = connect({ applicationName: 'my-relay' });
  const result = await runRelay({ sql, client: createEventBridgeClient(), settings, untilEmpty: true });
  // @ts-expect-error settings are validated: a string is no batch size
  settings.batchSize = '100';
  return result;
}

export function infrastructure(app: App): OutboxRelay {
  const stack = new Stack(app, 'S');
  const vpc = ec2.Vpc.fromLookup(stack, 'Vpc', { vpcId: 'vpc-1' });
  const proxy = rds.DatabaseProxy.fromDatabaseProxyAttributes(stack, 'Proxy', {
    dbProxyArn: 'arn',
    dbProxyName: 'p',
    endpoint: 'e',
    securityGroups: [],
  });
  const props: OutboxRelayProps = { vpc, securityGroups: [], database: { proxy, databaseName: 'orders' } };
  const relay = new OutboxRelay(stack, 'Outbox', props);
  // @ts-expect-error databaseName is required
  new OutboxRelay(stack, 'Broken', { vpc, securityGroups: [], database: { proxy } });
  return relay;
}
