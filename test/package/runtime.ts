// Run in a fresh project that installed the packed tarball, on each supported Node (by its type
// stripping, outside node_modules): imports every entry point, enqueues through the main API and
// every adapter, and relays them with the relay core. Prints one JSON line for the test.

import * as cdk from '@outbox-relay-aws/cdk';
import * as consumer from '@outbox-relay-aws/consumer';
import {
  connect,
  createEventBridgeClient,
  loadRelaySettings,
  OUTBOX_SEARCH_PATH,
  runRelay,
} from '@outbox-relay-aws/relay';
import * as operations from '@outbox-relay-aws/relay/operations';
import { drizzle } from 'drizzle-orm/node-postgres';
import { Kysely, PostgresDialect } from 'kysely';
import { enqueue } from 'outbox-relay-aws';
import * as viaDrizzle from 'outbox-relay-aws/drizzle';
import * as viaKysely from 'outbox-relay-aws/kysely';
import * as viaPg from 'outbox-relay-aws/pg';
import pg from 'pg';

const url = process.env.DATABASE_URL as string;
const tag = `node-${process.versions.node}`;
const event = (via: string) => ({
  type: 'PackageTested',
  source: 'test.package',
  aggregateType: tag,
  aggregateId: via,
  payload: { via, node: process.versions.node },
});

// The relay's statements name the outbox's objects through this search_path (docs/relay.md).
const sql = connect({ url, max: 2, searchPath: OUTBOX_SEARCH_PATH });
const pool = new pg.Pool({ connectionString: url, max: 2 });
try {
  const main = await sql.begin((tx) => enqueue(tx, event('postgres')));
  const client = await pool.connect();
  let viaClient: Awaited<ReturnType<typeof viaPg.enqueue>>;
  try {
    await client.query('begin');
    viaClient = await viaPg.enqueue(client, event('pg'));
    await client.query('commit');
  } finally {
    client.release();
  }
  const viaOrm = await drizzle(pool).transaction((tx) => viaDrizzle.enqueue(tx, event('drizzle')));
  const db = new Kysely<unknown>({
    dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: url, max: 1 }) }),
  });
  const viaBuilder = await db
    .transaction()
    .execute((trx) => viaKysely.enqueue(trx, event('kysely')))
    .finally(() => db.destroy());
  const relayed = await runRelay({
    sql,
    client: createEventBridgeClient({
      endpoint: process.env.BUS_URL,
      region: 'us-east-1',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    }),
    settings: loadRelaySettings({ EVENT_BUS_NAME: 'package-bus', OUTBOX_POLL_INTERVAL_MS: '20' }),
    untilEmpty: true,
  });
  console.log(
    JSON.stringify({
      node: process.versions.node,
      enqueued: [main, viaClient, viaOrm, viaBuilder],
      published: relayed.published,
      entryPoints: {
        consumer: typeof consumer.inbox,
        operations: typeof operations.getStatus,
        cdk: typeof cdk.OutboxRelay,
      },
    }),
  );
} finally {
  await pool.end();
  await sql.end({ timeout: 5 });
}
