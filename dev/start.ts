/**
 * `npm start`: the whole pipeline on one machine. Starts Postgres (embedded, unless DATABASE_URL
 * is set), migrates, starts the local bus, runs a demo producer that commits orders with their
 * events (and rolls some transactions back), runs the relay, and prints each event as the bus
 * accepts it plus the backlog and lag. Ctrl-C stops everything.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { createBillingHandler, createBillingSchema } from '../examples/billing/consumer.ts';
import { OrderPlaced } from '../examples/billing/events.ts';
import { type AcceptedEvent, startLocalBus } from '../shared/local/bus.ts';
import { explainError } from '../shared/platform/cli/errors.ts';
import { onInterrupt } from '../shared/platform/cli/signals.ts';
import {
  checkDatabaseUrl,
  connect,
  databasePasswords,
  maskDatabaseUrl,
  migrate,
  OUTBOX_SEARCH_PATH,
  redactPasswords,
  type Sql,
} from '../shared/platform/index.ts';
import { enqueueMany } from '../shared/producer/index.ts';
import { createRelay } from '../shared/relay/index.ts';
import { getStatus } from '../shared/relay/operations/index.ts';
import { startEmbeddedPostgres } from './embedded-postgres.ts';

/** Thrown inside a demo transaction to roll it back. */
class RollBack extends Error {}

/** The database's password, kept out of everything the demo prints (a driver's message included). */
const passwords = databasePasswords(process.env);
const log = (line: string) =>
  process.stdout.write(`${new Date().toISOString().slice(11, 23)}  ${redactPasswords(line, passwords)}\n`);

const abort = new AbortController();
// Ctrl-C stops everything in order and exits 0; pressed again (later than npm's forwarded copy of
// the same signal) it exits at once. The embedded server's launcher then still stops the server
// and deletes its directory, because it sees its stdin close.
const removeInterruptHandlers = onInterrupt(
  () => {
    log('stopping… (Ctrl-C again to force)');
    abort.abort();
  },
  () => process.exit(130),
);

let embedded: Awaited<ReturnType<typeof startEmbeddedPostgres>> | undefined;
let url = process.env.DATABASE_URL;
try {
  if (url) checkDatabaseUrl(url);
  else {
    log('DATABASE_URL is unset: starting an embedded Postgres (its data is deleted when the demo stops)…');
    embedded = await startEmbeddedPostgres();
    url = embedded.url;
  }
  log(`database: ${maskDatabaseUrl(url)}`);
  const applied = await migrate(url);
  log(applied.length ? `migrated: ${applied.join(', ')}` : 'schema is up to date');
} catch (error) {
  await embedded?.stop();
  const { message, exitCode } = explainError(error, { ...process.env, DATABASE_URL: url });
  process.stderr.write(`error: ${redactPasswords(message, passwords)}\n`);
  process.exit(exitCode);
}

const bus = await startLocalBus({ port: Number(process.env.LOCAL_BUS_PORT ?? 0) });
log(`local EventBridge endpoint: ${bus.url}`);
bus.emitter.on('accepted', (e: AcceptedEvent) => {
  const m = (
    e.detail as {
      metadata: { aggregateType: string; aggregateId: string; sequence: number; eventId: string };
    }
  ).metadata;
  log(
    `bus ← ${e.detailType.padEnd(14)} ${m.aggregateType}/${m.aggregateId} #${m.sequence}  eventId ${m.eventId.slice(0, 8)}…`,
  );
});

const sql = connect({ url, applicationName: 'outbox-demo' });
await createBillingSchema(sql);
// The example consumer, as if it were the target of a rule on OrderPlaced. Every other delivery is
// sent twice — EventBridge delivers at least once — and the inbox applies it once.
// Its metrics off: in Lambda they are EMF lines for CloudWatch; here they would bury the demo's lines.
const billing = createBillingHandler(sql, { metrics: false });
let deliveries = 0;
bus.emitter.on('accepted', (e: AcceptedEvent) => {
  if (e.detailType !== OrderPlaced.type) return;
  const event = {
    version: '0',
    id: e.id,
    'detail-type': e.detailType,
    source: e.source,
    account: '000000000000',
    time: e.time ?? '',
    region: 'local',
    resources: [],
    detail: e.detail,
  };
  const copies = ++deliveries % 2 === 0 ? 2 : 1;
  for (let i = 0; i < copies; i++) {
    billing(event, {} as never)
      .then((r) => {
        const result = r as { invoiced?: string; inbox?: string };
        log(
          result.invoiced
            ? `billing: invoiced order ${result.invoiced}`
            : `billing: ignored a ${result.inbox} delivery`,
        );
      })
      .catch((error: unknown) =>
        log(
          `billing: failed (${(error as Error).message}); in AWS, Lambda would retry it twice, then keep it in the on-failure queue`,
        ),
      );
  }
});
// The relay as every host builds it; the demo's bus name unless the environment names one.
const relayHost = createRelay({
  env: { EVENT_BUS_NAME: 'demo-bus', ...process.env },
  url,
  applicationName: 'outbox-demo-relay',
  clientConfig: {
    endpoint: bus.url,
    region: process.env.AWS_REGION ?? 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  },
});

// Order numbers go on from the last run's, so a database used before gets new orders (billing
// keys its invoices on the order id; reusing 1001 would be a different order with a taken key).
const [last] = await sql<{ n: string }[]>`
  select coalesce(max(aggregate_id::bigint), 1000)::text as n from outbox.outbox_aggregate
  where aggregate_type = 'order' and aggregate_id ~ '^[0-9]{1,15}$'`;
const producer = runDemoProducer(sql, abort.signal, Number(last?.n ?? 1000));
// The status is the operations library's: its statements name the outbox's tables through the
// session's search_path, `outbox, pg_temp`, as the monitor's and the CLI's sessions have it; the
// demo's own pool keeps the login's default (billing's table is in public).
const statusSql = connect({
  url,
  applicationName: 'outbox-demo-status',
  max: 1,
  searchPath: OUTBOX_SEARCH_PATH,
});
const reporter = runReporter(statusSql, abort.signal);
const relay = relayHost.run({ signal: abort.signal });
log('relay running; Ctrl-C to stop');

try {
  const result = await relay;
  await Promise.all([producer, reporter]);
  log(
    `relay stopped: published ${result.published}, retried ${result.retried}, dead-lettered ${result.deadLettered}`,
  );
} finally {
  await relayHost.close();
  await sql.end({ timeout: 5 });
  await statusSql.end({ timeout: 5 });
  await bus.close();
  await embedded?.stop();
  removeInterruptHandlers();
}

/**
 * Commits an order with its events every ~700 ms; every fourth transaction is rolled back.
 * @param lastOrder the highest order number already in the outbox; numbering goes on after it
 */
async function runDemoProducer(sql: Sql, signal: AbortSignal, lastOrder: number): Promise<void> {
  let n = 0;
  while (!signal.aborted) {
    n++;
    const orderId = String(lastOrder + n);
    const rollBack = n % 4 === 0;
    try {
      await sql.begin(async (tx) => {
        await tx`select 1`; // the business write would go here, e.g. insert into orders
        await OrderPlaced.enqueue(tx, {
          aggregateType: 'order',
          aggregateId: orderId,
          payload: { orderId, total: n * 10 },
        });
        await enqueueMany(tx, [
          {
            type: 'OrderConfirmed',
            source: 'demo.shop',
            aggregateType: 'order',
            aggregateId: orderId,
            payload: { orderId },
          },
        ]);
        if (rollBack) throw new RollBack();
      });
      log(`producer: committed order ${orderId} with 2 events`);
    } catch (error) {
      if (!(error instanceof RollBack)) throw error;
      log(`producer: rolled back order ${orderId} (its events must never reach the bus)`);
    }
    await sleep(700, undefined, { signal }).catch(() => {});
  }
}

/** Prints the backlog and lag every 3 s. */
async function runReporter(sql: Sql, signal: AbortSignal): Promise<void> {
  while (!signal.aborted) {
    await sleep(3_000, undefined, { signal }).catch(() => {});
    if (signal.aborted) return;
    const s = await getStatus(sql);
    log(
      `status: pending ${s.pending}, lag ${s.oldestPendingAgeSeconds.toFixed(2)} s, published ${s.published}, dead-lettered ${s.deadLettered}; bus accepted ${bus.stats.accepted}`,
    );
  }
}
