/**
 * The rehearsal's second shape: the demo stack synthesised with `-c databaseAccess=direct`, where
 * the relay, the monitor and the example consumer log in to the instance itself with IAM (no RDS
 * Proxy, no pooler). Runs on the database and the bus the first shape left behind (schema and roles
 * already applied by the migrate bundle), so it costs one relay invocation and a few short ones.
 *
 * The instance's endpoint is a front door that does what RDS does inside the server for an
 * `rds_iam` user — TLS required, an IAM token for this host, port, user and region — and hands the
 * session over TLS to Postgres itself, which serves it as a session of its own. Postgres cannot
 * check an IAM token, and the embedded build has no PAM or LDAP to delegate one to, so the check is
 * the front door's; everything else (the template's environment, verified TLS against the run's CA
 * as Lambda's bundle, the roles, no pooler) is what the functions get in AWS.
 */
import type postgres from 'postgres';
import { freePort } from '../../dev/net.ts';
import type { AcceptedEvent, LocalBus } from '../../shared/local/bus.ts';
import type { InvocationOutcome, RunningFunction } from '../../shared/local/lambda-runtime/lambda-process.ts';
import { readStack, type TemplateFunction } from '../../shared/local/lambda-runtime/template.ts';
import { EnvVar } from '../../shared/platform/index.ts';
import { countOrderViolations } from '../chaos/chaos.ts';
import { rehearseConsumerFailures } from './consumer-failures.ts';
import { startIamProxy } from './iam-proxy.ts';

/** What the first shape's run hands to this one. */
export interface DirectShapeContext {
  /** cdk.out of the direct shape (already synthesised). */
  cdkOut: string;
  stackName: string;
  region: string;
  account: string;
  /** Loopback address of the instance stand-in (in the server certificate's names). */
  instanceHost: string;
  postgres: { host: string; port: number };
  certs: { ca: string; cert: string; key: string };
  /** PEM text of the run's CA. */
  caPem: string;
  certPem: string;
  keyPem: string;
  db: postgres.Sql;
  bus: LocalBus;
  scale: number;
  runtimeEnv: Record<string, string>;
  check(ok: boolean, name: string, detail?: string): boolean;
  info(line: string): void;
  start(f: TemplateFunction): Promise<RunningFunction>;
  invoke(
    fn: RunningFunction,
    f: TemplateFunction,
    event: unknown,
    timeoutMs: number,
  ): Promise<InvocationOutcome>;
  describe(o: InvocationOutcome): string;
  produce(env: Record<string, string>, batch: number): Promise<{ eventId: string; aggregateId: string }[]>;
  asDelivery(e: AcceptedEvent): unknown;
  cleanups: (() => Promise<unknown>)[];
}

/** Runs the direct shape's functions and prints its checks, each named `direct: …`. */
export async function rehearseDirect(c: DirectShapeContext): Promise<void> {
  const port = await freePort();
  const stack = await readStack(c.cdkOut, c.stackName, {
    region: c.region,
    account: c.account,
    proxyEndpoint: 'no proxy in this shape',
    instanceAddress: c.instanceHost,
    instancePort: port,
  });
  const byPath = (suffix: string) => stack.functions.find((f) => f.path.endsWith(suffix));
  const relay = byPath('/Outbox/RelayFunction/Resource');
  const monitor = byPath('/Outbox/MonitorFunction/Resource');
  const consumer = stack.functions.find((f) => /Billing.*\/Function\/Resource$/.test(f.path));
  const env = (f: TemplateFunction | undefined) =>
    `${f?.environment[EnvVar.pgHost]}:${f?.environment[EnvVar.pgPort]} ${EnvVar.dbPooler}=${f?.environment[EnvVar.dbPooler]}`;
  const straight = [relay, monitor, consumer].every(
    (f) =>
      f?.environment[EnvVar.pgHost] === c.instanceHost &&
      f.environment[EnvVar.pgPort] === String(port) &&
      f.environment[EnvVar.iamAuth] === 'true' &&
      f.environment[EnvVar.dbPooler] === 'none',
  );
  if (
    !c.check(
      straight,
      'direct: the relay, the monitor and the consumer connect to the instance itself, with IAM and no pooler',
      `relay ${env(relay)}; monitor ${env(monitor)}; consumer ${env(consumer)}`,
    ) ||
    !relay ||
    !monitor ||
    !consumer
  )
    return;

  // The instance's endpoint: TLS with the instance's certificate, the IAM login, then Postgres.
  const instance = await startIamProxy({
    host: c.instanceHost,
    port,
    cert: c.certPem,
    key: c.keyPem,
    upstream: { ...c.postgres, tls: { ca: c.caPem, servername: c.postgres.host } },
    region: c.region,
  });
  c.cleanups.push(() => instance.close());

  const committed = await c.produce(
    {
      [EnvVar.pgHost]: c.instanceHost,
      [EnvVar.pgPort]: String(port),
      [EnvVar.pgDatabase]: relay.environment[EnvVar.pgDatabase] ?? 'app',
      [EnvVar.dbPooler]: 'none',
    },
    // Orders of their own: batch 3 is the scale-out step's, whose OrderPlaced events the example
    // consumer never received, and which it would now wait for (wait-for-gap, per type).
    4,
  );
  c.check(
    committed.length > 0,
    'direct: a producer commits events as the producer role',
    `${committed.length} events`,
  );

  const seenBefore = c.bus.events.length;
  const relayFn = await c.start(relay);
  const relaySchedule = stack.schedules.find((s) => s.targetLogicalId === relay.logicalId);
  const relayed = await c.invoke(
    relayFn,
    relay,
    relaySchedule?.input ?? {},
    relay.timeoutSeconds * 1000 * c.scale,
  );
  c.check(
    relayed.type === 'result',
    'direct: a relay invocation ends within its timeout',
    c.describe(relayed),
  );
  const onBus = c.bus.events
    .slice(seenBefore)
    .map((e) => e.detail as { metadata: { eventId: string; aggregateId: string; sequence: number } });
  const seen = new Set(onBus.map((d) => d.metadata.eventId));
  const missing = committed.filter((e) => !seen.has(e.eventId));
  const violations = countOrderViolations(onBus.map((d) => d.metadata as never));
  c.check(
    missing.length === 0 && violations === 0,
    'direct: every committed event reached the bus, in order per aggregate',
    `${committed.length - missing.length} of ${committed.length}; ${violations} out of order`,
  );

  const monitorFn = await c.start(monitor);
  const monitored = await c.invoke(monitorFn, monitor, {}, monitor.timeoutSeconds * 1000 * c.scale);
  c.check(
    monitored.type === 'result',
    'direct: a monitor invocation succeeds under its role',
    c.describe(monitored),
  );

  const deliveries = c.bus.events
    .slice(seenBefore)
    .filter((e) => e.source === 'demo.shop' && e.detailType === 'OrderPlaced');
  const [before] = await c.db<{ n: number }[]>`select count(*)::int as n from billing_invoice`;
  const consumerFn = await c.start(consumer);
  const consumed: InvocationOutcome[] = [];
  for (const e of deliveries) {
    consumed.push(
      await c.invoke(consumerFn, consumer, c.asDelivery(e), consumer.timeoutSeconds * 1000 * c.scale),
    );
  }
  const [after] = await c.db<{ n: number }[]>`select count(*)::int as n from billing_invoice`;
  const failed = consumed.find((o) => o.type !== 'result');
  c.check(
    !failed && (after?.n ?? 0) - (before?.n ?? 0) === deliveries.length && deliveries.length > 0,
    'direct: the example consumer applies each event, as its own role',
    `${(after?.n ?? 0) - (before?.n ?? 0)} invoices for ${deliveries.length} orders${failed ? `; ${c.describe(failed)}` : ''}`,
  );

  // Each function logged in as its own user with a valid token, and asked for a session of its own:
  // the statement timeout as a startup setting, which a transaction pooler would refuse.
  const users = new Map(
    [relay, monitor, consumer].map((f) => [f.environment[EnvVar.pgUser] ?? '', f.path.split('/').at(-2)]),
  );
  const byFunctions = instance.logins.filter((l) => users.has(l.user));
  const refused = instance.logins.filter((l) => !l.accepted);
  c.check(
    byFunctions.length > 0 &&
      refused.length === 0 &&
      [...users.keys()].every((u) => byFunctions.some((l) => l.user === u)),
    'direct: every login presented a valid IAM token for its own user, over TLS',
    `${instance.logins.length} logins (${[...users.keys()].map((u) => `${u} ${byFunctions.filter((l) => l.user === u).length}`).join(', ')})${refused[0] ? `; refused ${refused[0].user}: ${refused[0].reason}` : ''}`,
  );
  const withoutSession = byFunctions.filter((l) => l.parameters.statement_timeout === undefined);
  c.check(
    withoutSession.length === 0,
    'direct: the functions use sessions of their own (statement_timeout set at startup)',
    withoutSession.map((l) => l.user).join(', ') || `${byFunctions.length} logins`,
  );
  c.info(
    `direct: connections per warm container after one invocation: relay ${byFunctions.filter((l) => l.user === relay.environment[EnvVar.pgUser]).length}, monitor ${byFunctions.filter((l) => l.user === monitor.environment[EnvVar.pgUser]).length}, consumer ${byFunctions.filter((l) => l.user === consumer.environment[EnvVar.pgUser]).length}`,
  );
  // The consumer's failure path in this shape's topology (the queue: see run.ts's synthesis).
  await rehearseConsumerFailures({
    stack,
    stackName: c.stackName,
    region: c.region,
    account: c.account,
    consumer,
    consumerFn,
    invoke: c.invoke,
    timeoutMs: consumer.timeoutSeconds * 1000 * c.scale,
    db: c.db,
    shape: 'direct: ',
    check: c.check,
    info: c.info,
  });
  for (const fn of [relayFn, monitorFn, consumerFn]) await fn.stop();
}
