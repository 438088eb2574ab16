/**
 * `npm run rehearse`: synthesises the demo stack and runs, on this machine, what its template would
 * run in AWS — each function's bundle from cdk.out in a Node process of its own, with the
 * template's environment, memory and (scaled) timeout, under the database roles the deploy creates,
 * through a transaction pooler behind an IAM/TLS proxy stand-in, with verified TLS everywhere.
 * Prints one line per check and `rehearsal: N passed, N failed`; exits 1 when a check failed.
 *
 * Then the second shape, the demo without RDS Proxy (`-c databaseAccess=direct`): its relay,
 * monitor and consumer log in to the instance itself with IAM over TLS (test/rehearsal/direct.ts),
 * and its consumer reads an SQS queue (`-c consumerTopology=queue`). In each shape the consumer's
 * failure path runs in its topology (test/rehearsal/consumer-failures.ts): an event failing every
 * attempt lands in the failure queue, `outbox inbox queue replay` applies it once, a second
 * replay is a duplicate.
 *
 * Options: `--scale 0.25` (function timeouts and schedule gaps are multiplied by it),
 * `--cdk-out DIR` and `--cdk-out-direct DIR` (use existing syntheses of the two shapes instead of
 * synthesising), `--lag` (also run the relay on its schedule at the template's real timings across
 * 3 invocation boundaries, about 4 minutes more, and check the lag: p99 ≤ 1 s, max ≤ 3 s).
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import postgres from 'postgres';
import { delivery } from '../../dev/delivery.ts';
import { startEmbeddedPostgres } from '../../dev/embedded-postgres.ts';
import { freePort } from '../../dev/net.ts';
import { createBillingSchema } from '../../examples/billing/consumer.ts';
import { type AcceptedEvent, startLocalBus } from '../../shared/local/bus.ts';
import { startLocalLambda } from '../../shared/local/lambda.ts';
import {
  type InvocationOutcome,
  type RunningFunction,
  startFunction,
} from '../../shared/local/lambda-runtime/lambda-process.ts';
import { type InvocationRecord, LambdaService } from '../../shared/local/lambda-runtime/lambda-service.ts';
import { readStack, type TemplateFunction } from '../../shared/local/lambda-runtime/template.ts';
import {
  DEFAULT_ROLES,
  type Envelope,
  type EnvelopeMetadata,
  EnvVar,
  RELAY_STOPS_POLLING_BEFORE_TIMEOUT_MS,
} from '../../shared/platform/index.ts';
import { InboxMetricName } from '../../shared/platform/names.ts';
import { enqueueMany } from '../../shared/producer/index.ts';
import { countOrderViolations } from '../chaos/chaos.ts';
import { rehearseConsumerFailures } from './consumer-failures.ts';
import { rehearseDirect } from './direct.ts';
import { startIamProxy } from './iam-proxy.ts';
import { startPgBouncer } from './pgbouncer.ts';
import { rehearseRunbook } from './runbook.ts';
import { startSecretsEndpoint } from './secrets-manager.ts';
import { makeCertificates } from './tls.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));
const { values } = parseArgs({
  options: {
    scale: { type: 'string', default: '0.25' },
    lag: { type: 'boolean', default: false },
    'cdk-out': { type: 'string' },
    'cdk-out-direct': { type: 'string' },
    'stack-name': { type: 'string', default: 'OutboxRelayDemo' },
  },
});
const scale = Number(values.scale);
const stackName = values['stack-name'];
const REGION = 'us-east-1';
const ACCOUNT = '123456789012';
/** Where the proxy stand-in listens: a loopback address of its own, so it can take the template's port. */
const PROXY_HOST = '127.0.0.2';
/** Where the instance's endpoint stands in the direct shape (no proxy). */
const INSTANCE_HOST = '127.0.0.3';

const results: { ok: boolean; line: string }[] = [];
function check(ok: boolean, name: string, detail = ''): boolean {
  const line = `${ok ? 'ok  ' : 'FAIL'}  ${name}${detail ? ` — ${detail}` : ''}`;
  results.push({ ok, line });
  process.stdout.write(`${line}\n`);
  return ok;
}
const info = (line: string) => process.stdout.write(`      ${line}\n`);
const mb = (bytes: number) => `${(bytes / 2 ** 20).toFixed(0)} MB`;

const cleanups: (() => Promise<unknown>)[] = [];
const work = await mkdtemp(join(tmpdir(), 'outbox-rehearsal-'));
cleanups.push(() => rm(work, { recursive: true, force: true }));
let exitCode = 1;
try {
  await rehearse();
  exitCode = results.every((r) => r.ok) ? 0 : 1;
} catch (error) {
  check(false, 'rehearsal ran to the end', String((error as Error)?.stack ?? error));
} finally {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  const failed = results.filter((r) => !r.ok).length;
  process.stdout.write(`rehearsal: ${results.length - failed} passed, ${failed} failed\n`);
  process.exit(exitCode);
}

async function rehearse(): Promise<void> {
  // 1. What would be deployed: the template and the bundles, exactly as `cdk deploy` uploads them.
  let cdkOut = values['cdk-out'];
  if (!cdkOut) {
    cdkOut = join(work, 'cdk.out');
    execFileSync(join(root, 'node_modules', '.bin', 'cdk'), ['synth', '--quiet', '--output', cdkOut], {
      cwd: root,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
  }
  // The direct shape synthesises in the background while the first shape runs (mostly waiting on
  // the relay's invocations), so it adds little to the rehearsal's time.
  const cdkOutDirect = values['cdk-out-direct'] ?? join(work, 'cdk.out.direct');
  const directSynth: Promise<unknown> = values['cdk-out-direct']
    ? Promise.resolve()
    : synthesise(['-c', 'databaseAccess=direct', '-c', 'consumerTopology=queue', '--output', cdkOutDirect]);
  directSynth.catch(() => {}); // awaited (and reported) before the direct shape runs
  const certs = await makeCertificates(work, ['localhost', '127.0.0.1', PROXY_HOST, INSTANCE_HOST]);
  const adminPassword = randomUUID();

  const serverLog: string[] = [];
  // 2. Postgres serving TLS (the run's CA); only TLS connections are accepted. The function roles
  // are trusted from loopback: their IAM tokens were checked by the proxy stand-in.
  const pg = await startEmbeddedPostgres({
    tls: { cert: certs.cert, key: certs.key },
    hba: [
      'hostssl all postgres 127.0.0.1/32 scram-sha-256',
      'hostssl all outbox_admin 127.0.0.1/32 scram-sha-256',
      'hostssl all all 127.0.0.1/32 trust',
      'hostnossl all all 0.0.0.0/0 reject',
      'host all all ::1/128 reject',
    ].join('\n'),
    postgresFlags: ['-c', 'log_statement=all', '-c', 'log_line_prefix=%u|', '-c', 'log_destination=stderr'],
    serverLog: true,
    log: (line) => serverLog.push(line),
  });
  cleanups.push(() => pg.stop());
  const standIns = {
    region: REGION,
    account: ACCOUNT,
    proxyEndpoint: PROXY_HOST,
    instanceAddress: 'localhost',
    instancePort: pg.port,
  };
  const stack = await readStack(cdkOut, stackName, standIns);
  const byPath = (suffix: string) => stack.functions.find((f) => f.path.endsWith(suffix));
  const relay = byPath('/Outbox/RelayFunction/Resource');
  const monitor = byPath('/Outbox/MonitorFunction/Resource');
  const migrate = byPath('/Outbox/MigrateFunction/Resource');
  const consumer = stack.functions.find((f) => /Billing.*\/Function\/Resource$/.test(f.path));
  check(
    Boolean(relay && monitor && migrate),
    'the template has the relay, monitor and migrate functions',
    stack.functions
      .map((f) => `${f.path.split('/').slice(1, -1).join('/')} (${f.memoryMb} MB, ${f.timeoutSeconds} s)`)
      .join(', '),
  );
  if (!relay || !monitor || !migrate) return;
  for (const f of [relay, monitor, migrate, ...(consumer ? [consumer] : [])]) {
    check(f.runtime === 'nodejs24.x', `${short(f)} runs on nodejs24.x`, f.runtime);
  }

  // The database the instance is created with, and its master user (not a superuser on RDS).
  const admin = postgres(`postgres://postgres:outbox@localhost:${pg.port}/postgres`, {
    ssl: { ca: await readFile(certs.ca, 'utf8') },
    max: 1,
    onnotice: () => {},
  });
  cleanups.push(() => admin.end({ timeout: 1 }));
  const secretEntry = [...stack.secrets.entries()][0];
  const masterUser = secretEntry?.[1].username ?? 'outbox_admin';
  const database = migrate.environment[EnvVar.adminDatabase] ?? 'app';
  await admin.unsafe(`create role "${masterUser}" login createrole createdb password '${adminPassword}'`);
  await admin.unsafe(`create database "${database}" owner "${masterUser}"`);
  const db = postgres(`postgres://postgres:outbox@localhost:${pg.port}/${database}`, {
    ssl: { ca: await readFile(certs.ca, 'utf8') },
    max: 2,
    onnotice: () => {},
  });
  cleanups.push(() => db.end({ timeout: 1 }));

  // 3. The stand-ins for AWS: Secrets Manager, EventBridge, and RDS Proxy (IAM + TLS in front of
  // PgBouncer in transaction mode).
  const secrets = await startSecretsEndpoint(
    new Map(
      [...stack.secrets.keys()].map((arn) => [
        arn,
        JSON.stringify({
          username: masterUser,
          password: adminPassword,
          engine: 'postgres',
          host: 'localhost',
          port: pg.port,
          dbname: database,
        }),
      ]),
    ),
  );
  cleanups.push(() => secrets.close());
  const bus = await startLocalBus();
  cleanups.push(() => bus.close());
  // Lambda's Invoke API, for the monitor's scale-out: asynchronous invocations of the relay
  // function, handed to the relay's environments once they exist (step 8b).
  let onRelayInvoked: ((payload: unknown) => void) | undefined;
  const lambdaApi = await startLocalLambda({
    onInvoke: (i) => {
      if (i.functionName === relay.logicalId) onRelayInvoked?.(i.payload);
    },
  });
  cleanups.push(() => lambdaApi.close());
  const roleNames = [
    ...new Set(
      [relay, monitor, consumer]
        .flatMap((f) => (f ? [f.environment[EnvVar.pgUser] ?? ''] : []))
        .concat(DEFAULT_ROLES.producer),
    ),
  ].filter(Boolean);
  const pooler = await startPgBouncer({
    port: await freePort(),
    server: { host: 'localhost', port: pg.port },
    caFile: certs.ca,
    users: roleNames,
  });
  cleanups.push(() => pooler.stop());
  const proxyPort = Number(relay.environment[EnvVar.pgPort] ?? 5432);
  const proxy = await startIamProxy({
    host: PROXY_HOST,
    port: proxyPort,
    cert: await readFile(certs.cert, 'utf8'),
    key: await readFile(certs.key, 'utf8'),
    upstream: { host: '127.0.0.1', port: pooler.port },
    region: REGION,
  });
  cleanups.push(() => proxy.close());

  /** What the Lambda runtime provides around the template's environment. */
  const runtimeEnv = {
    AWS_REGION: REGION,
    AWS_DEFAULT_REGION: REGION,
    AWS_ACCESS_KEY_ID: 'ASIAREHEARSAL',
    AWS_SECRET_ACCESS_KEY: 'rehearsal-secret',
    AWS_SESSION_TOKEN: 'rehearsal-session',
    AWS_ENDPOINT_URL_EVENTBRIDGE: bus.url,
    AWS_ENDPOINT_URL_SECRETS_MANAGER: secrets.url,
    AWS_ENDPOINT_URL_LAMBDA: lambdaApi.url,
  };
  /** The template's environment as the runtime sees it: /var/task is the asset, /var/runtime's CA bundle is the run's CA. */
  const asDeployed = (f: TemplateFunction): TemplateFunction => {
    const environment: Record<string, string> = {};
    for (const [name, value] of Object.entries(f.environment)) {
      environment[name] = value
        .replace(/^\/var\/task(?=\/|$)/, f.assetDir)
        .replace(/^\/var\/runtime\/ca-cert\.pem$/, certs.ca);
    }
    return { ...f, environment };
  };
  const running: RunningFunction[] = [];
  const peak = new Map<string, number>();
  /** Starts a function as deployed; `overrides` amend its environment and the runtime's. */
  const start = async (
    f: TemplateFunction,
    overrides: { environment?: Record<string, string>; runtime?: Record<string, string> } = {},
  ) => {
    const deployed = asDeployed(f);
    const fn = await startFunction(
      {
        name: short(f),
        assetDir: deployed.assetDir,
        handler: f.handler,
        memoryMb: f.memoryMb,
        environment: { ...deployed.environment, ...overrides.environment },
      },
      { ...runtimeEnv, ...overrides.runtime },
    );
    running.push(fn);
    cleanups.push(() => fn.stop());
    return fn;
  };
  const invoke = async (fn: RunningFunction, f: TemplateFunction, event: unknown, timeoutMs: number) => {
    const outcome = await fn.invoke(event, timeoutMs);
    peak.set(short(f), Math.max(peak.get(short(f)) ?? 0, outcome.peakRss));
    return outcome;
  };
  const describe = (o: InvocationOutcome) =>
    o.type === 'result'
      ? JSON.stringify(o.result).slice(0, 300)
      : `${o.type}: ${String(o.error ?? '').slice(0, 1500)}`;

  // 4. The migrate function, as the Trigger runs it: admin secret, straight to the instance.
  const migrator = await start(migrate);
  const migrated = await invoke(migrator, migrate, { RequestType: 'Create' }, migrate.timeoutSeconds * 1000);
  check(
    migrated.type === 'result',
    'migrate (Trigger) applies the schema and creates the roles',
    describe(migrated),
  );
  await migrator.stop();
  const roles = await db<
    { rolname: string }[]
  >`select rolname from pg_roles where rolname = any(${roleNames})`;
  check(
    roles.length === roleNames.length,
    'the deployment roles exist',
    `${roles
      .map((r) => r.rolname)
      .sort()
      .join(', ')} of ${roleNames.join(', ')}`,
  );
  if (migrated.type !== 'result') return;
  if (consumer) {
    // The consumer service's own migration (its table, granted to its role), run by the master user.
    await createBillingSchema(db, consumer.environment[EnvVar.pgUser] ?? DEFAULT_ROLES.consumer);
  }

  // 5. A producer service commits events as the producer role, through the proxy.
  const producerEnv = {
    ...runtimeEnv,
    PATH: process.env.PATH ?? '',
    [EnvVar.pgHost]: PROXY_HOST,
    [EnvVar.pgPort]: String(proxyPort),
    [EnvVar.pgDatabase]: relay.environment[EnvVar.pgDatabase] ?? database,
    [EnvVar.pgUser]: DEFAULT_ROLES.producer,
    [EnvVar.iamAuth]: 'true',
    NODE_EXTRA_CA_CERTS: certs.ca,
  };
  const produce = async (batch: number, overrides: Record<string, string> = {}) => {
    const out = await runNode([join(root, 'test/rehearsal/producer.ts'), '--batch', String(batch)], {
      ...producerEnv,
      ...overrides,
    });
    return (JSON.parse(out) as { committed: { eventId: string; aggregateId: string; sequence: string }[] })
      .committed;
  };
  const stress = JSON.parse(await runNode([join(root, 'test/rehearsal/pooler-stress.ts')], producerEnv)) as {
    rounds: number;
    hangs: number;
    misrouted: number;
    errors: string[];
  };
  check(
    stress.hangs === 0 && stress.misrouted === 0,
    'a one-connection pool runs concurrent statements correctly behind the pooler',
    `${stress.rounds} rounds: ${stress.hangs} hung, ${stress.misrouted} got another statement's answer ${stress.errors.slice(0, 2).join(' | ')}`,
  );
  await db`delete from outbox.outbox where source = 'rehearsal.pooler'`;
  await db`delete from outbox.outbox_aggregate where aggregate_type = 'pooler'`;
  const committed = await produce(1);
  check(
    committed.length > 0,
    'a producer commits events as the producer role through the proxy',
    `${committed.length} events`,
  );

  // 6. The relay: two scheduled invocations in one warm process, timeouts scaled.
  const relaySchedule = stack.schedules.find((s) => s.targetLogicalId === relay.logicalId);
  check(Boolean(relaySchedule), 'a schedule invokes the relay', relaySchedule?.expression ?? 'none');
  // Each invocation polls until 8 s before its timeout; the next one must start before that.
  const overlap =
    relay.timeoutSeconds - RELAY_STOPS_POLLING_BEFORE_TIMEOUT_MS / 1000 - (relaySchedule?.periodSeconds ?? 0);
  check(
    overlap > 0,
    "each relay invocation still polls when the schedule's next one starts",
    `timeout ${relay.timeoutSeconds} s, polling until ${RELAY_STOPS_POLLING_BEFORE_TIMEOUT_MS / 1000} s before it, every ${relaySchedule?.periodSeconds} s: ${overlap} s of overlap`,
  );
  const relayFn = await start(relay);
  info(`relay cold start: ${relayFn.initMs.toFixed(0)} ms`);
  const relayTimeoutMs = relay.timeoutSeconds * 1000 * scale;
  const first = await invoke(relayFn, relay, relaySchedule?.input ?? {}, relayTimeoutMs);
  check(first.type === 'result', 'relay invocation 1 ends within its timeout', describe(first));
  const loginsAfterFirst = proxy.logins.filter((l) => l.user === relay.environment[EnvVar.pgUser]).length;
  const committedLater = await produce(2);
  const second = await invoke(relayFn, relay, relaySchedule?.input ?? {}, relayTimeoutMs);
  check(second.type === 'result', 'relay invocation 2 (warm) ends within its timeout', describe(second));
  const relayLogins = proxy.logins.filter((l) => l.user === relay.environment[EnvVar.pgUser]).length;
  info(
    `relay logins through the proxy: ${loginsAfterFirst} in invocation 1, ${relayLogins - loginsAfterFirst} in invocation 2`,
  );

  const all = [...committed, ...committedLater];
  const onBus = bus.events.map(
    (e) => e.detail as { metadata: { eventId: string; aggregateId: string; sequence: number } },
  );
  const seen = new Set(onBus.map((d) => d.metadata.eventId));
  const missing = all.filter((c) => !seen.has(c.eventId));
  check(
    missing.length === 0,
    'every committed event reached the bus',
    `${all.length - missing.length} of ${all.length}`,
  );
  const violations = countOrderViolations(onBus.map((d) => d.metadata as EnvelopeMetadata));
  check(violations === 0, 'events reached the bus in order per aggregate', `${violations} out of order`);
  const busNames = new Set(bus.events.map((e) => e.eventBusName));
  const expectedBus = relay.environment[EnvVar.eventBusName];
  check(
    busNames.size === 1 && busNames.has(expectedBus),
    'events went to the event bus the template names',
    [...busNames].join(', '),
  );

  // 7. The monitor, after some published rows are back-dated past the retention.
  const backdated = await db`
    update outbox.outbox set published_at = now() - interval '30 days'
    where id in (select id from outbox.outbox where published_at is not null order by id limit 10)`;
  const monitorSchedule = stack.schedules.find((s) => s.targetLogicalId === monitor.logicalId);
  check(Boolean(monitorSchedule), 'a schedule invokes the monitor', monitorSchedule?.expression ?? 'none');
  const monitorFn = await start(monitor);
  const monitored = await invoke(
    monitorFn,
    monitor,
    monitorSchedule?.input ?? {},
    monitor.timeoutSeconds * 1000 * scale,
  );
  const pruned = (monitored.result as { prune?: { publishedDeleted?: number } } | undefined)?.prune
    ?.publishedDeleted;
  check(
    monitored.type === 'result' && pruned === backdated.count,
    'the monitor prunes what expired, under its own role',
    `${pruned ?? '?'} of ${backdated.count} back-dated rows; ${describe(monitored)}`,
  );
  // The monitor also enqueues its heartbeat (docs/observe.md#the-heartbeat): not one of the events.
  const [left] = await db<{ n: number }[]>`
    select count(*)::int as n from outbox.outbox where source <> 'outbox.heartbeat'`;
  check(left?.n === all.length - backdated.count, 'nothing else was pruned', `${left?.n} rows left`);
  // The heartbeat that monitor run enqueued goes the whole way: the next relay invocation sends it.
  const third = await invoke(relayFn, relay, relaySchedule?.input ?? {}, relayTimeoutMs);
  const heartbeats = bus.events.filter(
    (e) => e.source === 'outbox.heartbeat' && e.detailType === 'OutboxHeartbeat',
  );
  check(
    third.type === 'result' && heartbeats.length > 0,
    "the monitor's heartbeat reaches the bus through the relay",
    `${heartbeats.length} heartbeat(s) on the bus; ${describe(third)}`,
  );

  // 8. The example consumer, on the bus's deliveries that its rule matches; one delivered twice.
  if (consumer) {
    const deliveries = bus.events.filter((e) => e.source === 'demo.shop' && e.detailType === 'OrderPlaced');
    const consumerFn = await start(consumer);
    const outcomes: InvocationOutcome[] = [];
    for (const [i, e] of [...deliveries, deliveries[0]].entries()) {
      if (!e) continue;
      outcomes.push(
        await invoke(consumerFn, consumer, asDelivery(e), consumer.timeoutSeconds * 1000 * scale),
      );
      if (i === 0)
        outcomes.push(
          await invoke(consumerFn, consumer, asDelivery(e), consumer.timeoutSeconds * 1000 * scale),
        );
    }
    const failures = outcomes.filter((o) => o.type !== 'result');
    const [invoices] = await db<{ n: number }[]>`select count(*)::int as n from billing_invoice`;
    check(
      failures.length === 0 && invoices?.n === deliveries.length,
      'the example consumer applies each event once, as its own role',
      `${invoices?.n} invoices for ${deliveries.length} orders over ${outcomes.length} deliveries${failures[0] ? `; ${describe(failures[0])}` : ''}`,
    );
    // The heartbeat, which its rule matches too: acknowledged by the inbox, the handler not called
    // (HeartbeatReceived, which the consumer's heartbeat alarm watches: step 10).
    const beats: InvocationOutcome[] = [];
    for (const e of heartbeats) {
      beats.push(await invoke(consumerFn, consumer, asDelivery(e), consumer.timeoutSeconds * 1000 * scale));
    }
    const [invoicesAfter] = await db<{ n: number }[]>`select count(*)::int as n from billing_invoice`;
    check(
      beats.length > 0 && beats.every((o) => o.type === 'result') && invoicesAfter?.n === invoices?.n,
      'the example consumer acknowledges the heartbeat without calling its handler',
      `${beats.length} heartbeat(s); ${invoicesAfter?.n} invoices; ${beats
        .map((o) => describe(o))
        .join(' | ')
        .slice(0, 300)}`,
    );
    // An OrderPlaced whose predecessor of its type never comes: it waits (Lambda's retry), then,
    // with the gap wait passed on the database clock, is parked and counted (InboxParked).
    const ahead = delivery({
      detailType: 'OrderPlaced',
      source: 'demo.shop',
      region: REGION,
      account: ACCOUNT,
      metadata: { aggregateId: 'rehearsal-gap', sequence: 2, typeSequence: 2 },
      data: { orderId: 'rehearsal-gap', total: 1 },
    });
    const waits = await invoke(consumerFn, consumer, ahead, consumer.timeoutSeconds * 1000 * scale);
    await db`update outbox.inbox_gap set first_seen_at = first_seen_at - interval '200 seconds'`;
    const parks = await invoke(consumerFn, consumer, ahead, consumer.timeoutSeconds * 1000 * scale);
    const [parkedRow] = await db<{ n: number }[]>`
      select count(*)::int as n from outbox.inbox_message where consumer = 'billing' and outcome = 'parked'`;
    check(
      waits.type !== 'result' && parks.type === 'result' && parkedRow?.n === 1,
      'the example consumer waits for a missing event, then parks the one behind it',
      `${describe(waits)}; then ${describe(parks)}; ${parkedRow?.n} parked`,
    );
    // Its failure path in this shape's topology (direct; the second shape runs the queue).
    await rehearseConsumerFailures({
      stack,
      stackName,
      region: REGION,
      account: ACCOUNT,
      consumer,
      consumerFn,
      invoke,
      timeoutMs: consumer.timeoutSeconds * 1000 * scale,
      db,
      shape: '',
      check,
      info,
    });
  } else {
    check(false, 'the template has the example consumer', 'no Billing function in the demo stack');
  }

  // 8b. Scale-out: the monitor, with a backlog that asks for more relays, invokes the relay
  // function through Lambda's Invoke API; the extra relays run in environments of their own
  // (their own connections through the proxy) and return once nothing is pending.
  const maxRelays = Number(monitor.environment[EnvVar.maxRelays] ?? 1);
  check(
    maxRelays > 1 && monitor.environment[EnvVar.relayFunctionName] === relay.logicalId,
    'the monitor may start extra relays of the relay function',
    `${EnvVar.maxRelays}=${monitor.environment[EnvVar.maxRelays]}, ${EnvVar.relayFunctionName}=${monitor.environment[EnvVar.relayFunctionName]}`,
  );
  if (maxRelays > 1) {
    const extraRuns: Promise<InvocationRecord>[] = [];
    const extras = new LambdaService({
      spec: {
        name: `${short(relay)}-extra`,
        assetDir: asDeployed(relay).assetDir,
        handler: relay.handler,
        memoryMb: relay.memoryMb,
        environment: asDeployed(relay).environment,
      },
      baseEnv: runtimeEnv,
      timeoutMs: relay.timeoutSeconds * 1000 * scale,
    });
    cleanups.push(() => extras.stop({ wait: false }));
    onRelayInvoked = (payload) => extraRuns.push(extras.invoke(payload));
    const backlog = await produce(3);
    info(`scale-out: ${backlog.length} events committed for the monitor to find pending`);
    const scaler = await startFunction(
      {
        name: `${short(monitor)}-scale-out`,
        assetDir: asDeployed(monitor).assetDir,
        handler: monitor.handler,
        memoryMb: monitor.memoryMb,
        // One relay per pending event: the small backlog asks for every relay allowed.
        environment: { ...asDeployed(monitor).environment, [EnvVar.backlogPerRelay]: '1' },
      },
      runtimeEnv,
    );
    cleanups.push(() => scaler.stop());
    const scaled = await scaler.invoke(monitorSchedule?.input ?? {}, monitor.timeoutSeconds * 1000 * scale);
    const { started = 0, claimable = 0 } =
      (scaled.result as { scaleOut?: { started?: number; claimable?: number } } | undefined)?.scaleOut ?? {};
    const ran = await Promise.all(extraRuns);
    const drained = ran.filter(
      (r) =>
        r.outcome.type === 'result' &&
        (r.outcome.result as { stopReason?: string; scaleOut?: boolean }).scaleOut === true,
    );
    const seenNow = new Set(
      bus.events.map((e) => (e.detail as { metadata: { eventId: string } }).metadata.eventId),
    );
    check(
      scaled.type === 'result' &&
        started === Math.min(maxRelays, claimable) - 1 &&
        started > 0 &&
        drained.length === started &&
        backlog.every((c) => seenNow.has(c.eventId)),
      'the monitor starts extra relays for a backlog, and they relay it and return',
      `${started} started for ${claimable} claimable (max ${maxRelays} relays; ${JSON.stringify((scaled.result as { scaleOut?: unknown } | undefined)?.scaleOut)}); ${drained.length} returned: ${ran
        .map((r) => describe(r.outcome))
        .join(' | ')
        .slice(0, 600)}`,
    );
  }

  // 8c. On call: the lag runbook (docs/operations.md#lag) followed with the commands it gives,
  // `outbox status` logging in as the monitor's user through the proxy (test/rehearsal/runbook.ts).
  await rehearseRunbook({
    stack,
    relay,
    monitor,
    region: REGION,
    caFile: certs.ca,
    db,
    bus,
    logins: proxy.logins,
    runtimeEnv,
    asDeployed,
    start,
    invoke,
    onRelayInvoked: (handler) => {
      onRelayInvoked = handler;
    },
    scale,
    describe,
    check,
    info,
    cleanups,
  });

  // 8d. With --lag: the relay on its schedule at the template's real timings, across 3 invocation
  // boundaries, a producer committing 50 events a second; commit-to-bus lag through the proxy.
  if (values.lag && relaySchedule) {
    const periodMs = relaySchedule.periodSeconds * 1000;
    const service = new LambdaService({
      spec: {
        name: `${short(relay)}-scheduled`,
        assetDir: asDeployed(relay).assetDir,
        handler: relay.handler,
        memoryMb: relay.memoryMb,
        environment: asDeployed(relay).environment,
      },
      baseEnv: runtimeEnv,
      timeoutMs: relay.timeoutSeconds * 1000,
    });
    cleanups.push(() => service.stop({ wait: false }));
    const committedAt = new Map<string, number>();
    const lagStart = Date.now();
    const failures: unknown[] = [];
    const timers: NodeJS.Timeout[] = [];
    for (let k = 0; k <= 3; k++) {
      timers.push(
        setTimeout(() => service.invoke(relaySchedule.input).catch((e) => failures.push(e)), k * periodMs),
      );
    }
    await new Promise((r) => setTimeout(r, 5_000));
    let n = 0;
    const until = lagStart + 3 * periodMs + 20_000;
    while (Date.now() < until) {
      const tick = Date.now();
      const batch = await db.begin((tx) =>
        enqueueMany(
          tx,
          Array.from({ length: 5 }, () => ({
            type: 'LagProbe',
            source: 'rehearsal.lag',
            aggregateType: 'lag',
            aggregateId: String(n++ % 500),
            payload: { n },
          })),
        ),
      );
      for (const r of batch) committedAt.set(r.eventId, Date.now());
      await new Promise((r) => setTimeout(r, Math.max(0, 100 - (Date.now() - tick))));
    }
    await new Promise((r) => setTimeout(r, 3_000));
    for (const t of timers) clearTimeout(t);
    const lags: number[] = [];
    for (const e of bus.events) {
      const c = committedAt.get((e.detail as { metadata: { eventId: string } }).metadata.eventId);
      if (c !== undefined) lags.push(e.receivedAt - c);
    }
    lags.sort((a, b) => a - b);
    const at = (p: number) => lags[Math.min(lags.length - 1, Math.floor(p * lags.length))] ?? Number.NaN;
    await service.stop({ wait: false });
    check(
      failures.length === 0 && lags.length >= committedAt.size && at(0.99) <= 1_000 && at(1) <= 3_000,
      'relay lag on its schedule across 3 invocation boundaries: p99 ≤ 1 s, max ≤ 3 s',
      `${lags.length} of ${committedAt.size} delivered; p50 ${at(0.5)} ms, p99 ${at(0.99)} ms, max ${at(1)} ms; ${service.peakConcurrency} invocations at once at the peak${failures.length ? `; ${String(failures[0])}` : ''}`,
    );
  }

  // 9. Memory: each function's peak RSS against its MemorySize.
  for (const f of [relay, monitor, migrate, ...(consumer ? [consumer] : [])]) {
    const bytes = peak.get(short(f)) ?? 0;
    check(
      bytes > 0 && bytes < f.memoryMb * 2 ** 20,
      `${short(f)} peak RSS fits its memory`,
      `${mb(bytes)} of ${f.memoryMb} MB`,
    );
  }

  // 10. Metrics: every EMF line parses, and every alarm watches something a function emitted.
  const emitted = new Set<string>();
  let emfLines = 0;
  const badEmf: string[] = [];
  for (const fn of running) {
    for (const line of fn.logLines) {
      if (!line.includes('_aws')) continue;
      emfLines++;
      const problem = emfProblem(line, (namespace, metric, dimensions) =>
        emitted.add(metricKey(namespace, metric, dimensions)),
      );
      if (problem) badEmf.push(`${fn.name}: ${problem}`);
    }
  }
  check(
    emfLines > 0 && badEmf.length === 0,
    'every EMF line parses',
    `${emfLines} lines${badEmf.length ? `; ${badEmf.slice(0, 3).join('; ')}` : ''}`,
  );
  for (const alarm of stack.alarms) {
    if (alarm.namespace.startsWith('AWS/')) {
      // Emitted by AWS itself; what can be wrong is the dimension naming a resource that is not ours.
      const value = Object.values(alarm.dimensions)[0] ?? '';
      const known = stack.functions.some((f) => f.logicalId === value) || value.length > 0;
      check(
        known,
        `alarm ${alarm.logicalId} watches ${alarm.namespace} ${alarm.metricName}`,
        JSON.stringify(alarm.dimensions),
      );
      continue;
    }
    const key = metricKey(alarm.namespace, alarm.metricName, alarm.dimensions);
    if (alarm.optional) {
      // Filled when missing (the errors alarm's designed gap retries): one the inbox emits when it happens.
      check(
        (Object.values(InboxMetricName) as string[]).includes(alarm.metricName),
        `alarm ${alarm.logicalId} reads a metric the inbox emits when it happens`,
        key,
      );
      continue;
    }
    check(emitted.has(key), `alarm ${alarm.logicalId} watches a metric a function emitted`, key);
  }

  // 11. Nothing that a transaction pooler breaks: no SET, session advisory lock, named prepared
  // statement or LISTEN by a function's role (the server logged every statement with its user).
  const functionUsers = new Set(roleNames);
  const offending = serverLog.filter((line) => {
    const [user, rest = ''] = line.split('|', 2);
    if (!user || !functionUsers.has(user)) return false;
    // PgBouncer applies the client's tracked startup parameters itself when it links a server.
    if (
      /statement: SET (application_name|client_encoding|datestyle|timezone|standard_conforming_strings)=/i.test(
        rest,
      )
    )
      return false;
    return (
      /(statement|execute [^:]*): (set |reset |listen |prepare |declare .* with hold)/i.test(rest) ||
      /pg_advisory_lock|pg_try_advisory_lock\(/i.test(rest) ||
      /execute (?!<unnamed>)[^:]+:/.test(rest)
    );
  });
  check(
    offending.length === 0,
    'no function uses session state a transaction pooler breaks',
    offending.slice(0, 3).join(' | ') || `${serverLog.length} statements read`,
  );
  const poolerWarnings = (await pooler.log())
    .split('\n')
    .filter(
      (l) => /WARNING|ERROR/.test(l) && !/pooler error: (client|server) (unexpected eof|close)/i.test(l),
    );
  check(
    poolerWarnings.length === 0,
    'PgBouncer saw no protocol errors',
    poolerWarnings.slice(0, 3).join(' | '),
  );
  const refused = proxy.logins.filter((l) => !l.accepted);
  check(
    proxy.logins.length > 0 && refused.length === 0,
    'every login through the proxy presented a valid IAM token for its user',
    `${proxy.logins.length} logins${refused[0] ? `; refused ${refused[0].user}: ${refused[0].reason}` : ''}`,
  );

  // 12. The second shape: no proxy, IAM straight to the instance (its statements are not part of
  // the pooler check above, which has run).
  const synthesised = await directSynth.then(
    () => undefined,
    (error: unknown) => String((error as Error)?.message ?? error),
  );
  if (
    !check(synthesised === undefined, 'the direct shape (-c databaseAccess=direct) synthesises', synthesised)
  )
    return;
  for (const fn of running) await fn.stop();
  await rehearseDirect({
    cdkOut: cdkOutDirect,
    stackName,
    region: REGION,
    account: ACCOUNT,
    instanceHost: INSTANCE_HOST,
    postgres: { host: 'localhost', port: pg.port },
    certs,
    caPem: await readFile(certs.ca, 'utf8'),
    certPem: await readFile(certs.cert, 'utf8'),
    keyPem: await readFile(certs.key, 'utf8'),
    db,
    bus,
    scale,
    runtimeEnv,
    check,
    info,
    start,
    invoke,
    describe,
    produce: (env, batch) => produce(batch, env),
    asDelivery,
    cleanups,
  });
}

/** Runs `cdk synth --quiet` with `args` in the background; rejects with its error output. */
function synthesise(args: string[]): Promise<void> {
  return new Promise((resolve, reject) => {
    const child = spawn(join(root, 'node_modules', '.bin', 'cdk'), ['synth', '--quiet', ...args], {
      cwd: root,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    let err = '';
    child.stderr.on('data', (c: Buffer) => {
      err += c.toString();
    });
    child.on('error', reject);
    child.on('exit', (code) =>
      code === 0 ? resolve() : reject(new Error(`cdk synth exited ${code}: ${err}`)),
    );
  });
}

/** The function's construct path without the stack and `Resource`, e.g. `Outbox/RelayFunction`. */
/** The event EventBridge hands the consumer for an event the bus accepted. */
function asDelivery(e: AcceptedEvent) {
  const { metadata, data } = e.detail as unknown as Envelope;
  return delivery({
    detailType: e.detailType,
    source: e.source,
    region: REGION,
    account: ACCOUNT,
    time: e.time ?? new Date(e.receivedAt).toISOString(),
    metadata,
    data,
  });
}

function short(f: TemplateFunction): string {
  return f.path.split('/').slice(1, -1).join('/') || f.logicalId;
}

function metricKey(namespace: string, metric: string, dimensions: Record<string, string>): string {
  const dims = Object.entries(dimensions)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([k, v]) => `${k}=${v}`)
    .join(',');
  return `${namespace}/${metric}{${dims}}`;
}

/**
 * Why `line` is not a valid Embedded Metric Format document (undefined when it is), reporting
 * each metric with its dimension values — see the CloudWatch EMF specification.
 */
function emfProblem(
  line: string,
  report: (namespace: string, metric: string, dimensions: Record<string, string>) => void,
): string | undefined {
  let doc: Record<string, unknown>;
  try {
    doc = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return `not JSON: ${line.slice(0, 120)}`;
  }
  const aws = doc._aws as { Timestamp?: unknown; CloudWatchMetrics?: unknown } | undefined;
  if (!aws) return undefined; // a log line that mentions _aws, not an EMF document
  if (typeof aws.Timestamp !== 'number') return '_aws.Timestamp is not a number';
  if (!Array.isArray(aws.CloudWatchMetrics) || aws.CloudWatchMetrics.length === 0)
    return 'no CloudWatchMetrics';
  for (const directive of aws.CloudWatchMetrics as {
    Namespace?: unknown;
    Dimensions?: unknown;
    Metrics?: unknown;
  }[]) {
    if (typeof directive.Namespace !== 'string' || directive.Namespace.length === 0) return 'no Namespace';
    if (!Array.isArray(directive.Dimensions) || !Array.isArray(directive.Metrics))
      return 'no Dimensions or Metrics';
    for (const metric of directive.Metrics as { Name?: unknown; Unit?: unknown }[]) {
      if (typeof metric.Name !== 'string') return 'a metric without a Name';
      const value = doc[metric.Name];
      if (typeof value !== 'number' && !(Array.isArray(value) && value.every((v) => typeof v === 'number')))
        return `${metric.Name} has no numeric value`;
      for (const set of directive.Dimensions as string[][]) {
        const dimensions: Record<string, string> = {};
        for (const name of set) {
          if (typeof doc[name] !== 'string') return `dimension ${name} has no value`;
          dimensions[name] = doc[name] as string;
        }
        report(directive.Namespace, metric.Name, dimensions);
      }
    }
  }
  return undefined;
}

/** Runs a Node script to completion and returns its stdout. */
function runNode(args: string[], env: Record<string, string>): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, args, { env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (c: Buffer) => {
      out += c.toString();
    });
    child.stderr.on('data', (c: Buffer) => {
      err += c.toString();
    });
    child.on('exit', (code) =>
      code === 0 ? resolve(out) : reject(new Error(`${args[0]} exited ${code}: ${err}`)),
    );
  });
}
