/**
 * `OutboxRelay`: everything the relay needs next to an existing Postgres — reached through RDS
 * Proxy, or directly on an RDS instance or Aurora cluster, with IAM authentication either way — the
 * relay and monitor Lambdas on EventBridge Scheduler schedules, the event bus, optional
 * deploy-time migrations, alarms wired to an SNS topic, and a dashboard.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Annotations, ArnFormat, Duration, Names, Stack, Tokenization, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cwActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as rds from 'aws-cdk-lib/aws-rds';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as targets from 'aws-cdk-lib/aws-scheduler-targets';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as triggers from 'aws-cdk-lib/triggers';
import { Construct } from 'constructs';
import {
  checkEnvironment,
  MONITOR_TUNING_VARS,
  type MonitorTuning,
  poolSize,
  RELAY_TUNING_VARS,
  type RelayTuning,
  readSetting,
  tuningToEnv,
} from '../shared/platform/config.ts';
import {
  DEFAULT_METRIC_NAMESPACE,
  DEFAULT_ROLES,
  EnvVar,
  LAMBDA_CA_BUNDLE,
  METRIC_DIMENSION,
  METRIC_SERVICE,
  MetricName,
  MONITOR_POOL_SIZE,
  RELAY_STOPS_POLLING_BEFORE_TIMEOUT_MS,
  relayPoolSize,
  ServiceName,
} from '../shared/platform/names.ts';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));

/** The Lambda handlers' sources (relative to the repository) by bundle name. */
export const HANDLER_ENTRIES = {
  relay: 'functions/relay/handler.ts',
  monitor: 'functions/monitor/handler.ts',
  migrate: 'functions/migrate/handler.ts',
} as const;
/** One of {@link HANDLER_ENTRIES}' names. */
export type HandlerName = keyof typeof HANDLER_ENTRIES;

/**
 * Where the installed package keeps its handler bundles, built at pack time (scripts/build.ts):
 * `dist/lambda/<name>/index.mjs`, beside the compiled construct in `dist/infra/`. A consumer's
 * `cdk synth` then only zips that folder — no esbuild, no Docker. From a source checkout (this
 * file under `infra/`) the folder does not exist, and the construct bundles the TypeScript handlers
 * with NodejsFunction instead.
 * @returns the bundle's folder, or undefined when there is no pre-built bundle
 */
export function prebuiltBundle(name: HandlerName): string | undefined {
  const dir = fileURLToPath(new URL(`../lambda/${name}`, import.meta.url));
  return existsSync(join(dir, 'index.mjs')) ? dir : undefined;
}

/**
 * How the project's Lambdas are bundled: ESM for Node 24, minified, locally with esbuild (no
 * Docker), our pinned AWS SDK clients included rather than the runtime's copy.
 *
 * - `mainFields: ['module', 'main']`: the packages' ES module builds, which esbuild can tree-shake;
 *   the relay bundle goes from 1,026 to 839 KiB with the same code (bench/, `npm run bench`).
 * - No source map, but function names kept (`keepNames`): stack traces read `at parseEnv`, not
 *   `at Pb`. Measured on the relay bundle in a process with a 128 MB function's heap limits, a map
 *   read through `--enable-source-maps` cost 15–18 ms and 10–19 MB of RSS at init, and formatting
 *   the first error's stack took 45–65 ms and lifted RSS by another 28–38 MB, to 116–128 MB: at
 *   the limit of a 128 MB function, exactly when something is already failing. Names cost 42 KiB
 *   and 4 ms of init. To ship maps anyway, pass your own `bundling` with `sourceMap: true` and
 *   `sourcesContent: false`.
 */
export const OUTBOX_BUNDLING: nodejs.BundlingOptions = {
  format: nodejs.OutputFormat.ESM,
  mainFields: ['module', 'main'],
  minify: true,
  sourceMap: false,
  keepNames: true,
  target: 'node24',
  bundleAwsSDK: true,
  forceDockerBundling: false,
  externalModules: ['pg-native'],
  banner: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);",
};

/**
 * The relay's default memory, MB: the smallest size whose share of a vCPU lets one invocation reach
 * the PutEvents bound at the default settings (4 calls in flight × 10 entries / 20 ms = 2,000
 * events/s); docs/performance.md#lambda-sizing-at-20-ms-bus-latency, from `npm run bench`. The bundled handler measured about
 * 7,800 events per CPU-second at 20 ms bus latency, so 256 MB (14.5 % of a vCPU) moves about
 * 1,130 events/s, CPU-bound, while 512 MB (28.9 %) reaches the 2,000; above 512 MB more memory
 * buys nothing unless OUTBOX_PUBLISH_CONCURRENCY is raised. Memory itself does not decide: over
 * 100,000 events the handler peaked at 121–128 MB RSS with a 128 MB function's heap limits and
 * 162 MB with 512 MB's. The price: $17.28 a month for a relay polling all the time at 512 MB (Arm,
 * us-east-1) against $8.64 at 256 MB; per event, both about $0.003 per million.
 */
export const DEFAULT_RELAY_MEMORY_MB = 512;

/**
 * How much longer than its schedule's period the relay's timeout is by default, s. An invocation
 * polls until 8 s before its timeout (RELAY_STOPS_POLLING_BEFORE_TIMEOUT_MS), so with
 * `rate(1 minute)` and 90 s each one is still polling 22 s after its successor was due: the
 * successor may be that late (Scheduler's delay, a cold start) before anything stops polling.
 * Measured as deployed (`npm run bench -- --only lambda-lag`, docs/performance.md#commit-to-bus-lag-as-deployed-the-relay-bundle-on-its-schedule-100-eventss-20-ms-bus-latency-3-invocation-boundaries). The price:
 * two relays poll at once for up to 22 s a minute, so the relay runs about 82 s of Lambda time a
 * minute instead of 52 s, and opens two pools of connections at the peak.
 */
export const RELAY_TIMEOUT_OVERLAP_SECONDS = 30;
/** Below this much overlap, s, the construct warns: a late or cold successor leaves a gap. */
const MIN_OVERLAP_SECONDS = 15;
/** Default of {@link OutboxRelayProps.maxRelays}. */
export const DEFAULT_MAX_RELAYS = 4;
/** Default of {@link OutboxRelayProps.backlogPerRelay}. */
export const DEFAULT_BACKLOG_PER_RELAY = 30_000;
/** Default of {@link OutboxRelayProps.databaseConnectionBudget}. */
export const DEFAULT_DATABASE_CONNECTION_BUDGET = 40;
/**
 * Economy mode's quiet period, s (`OUTBOX_IDLE_RETURN_SECONDS` under `relayMode: 'economy'`): a
 * relay invocation that claimed nothing for this long returns, and the schedule brings the next
 * one. Long enough for a burst's stragglers (a producer's next transaction a few seconds later)
 * to go with the same invocation.
 */
export const ECONOMY_IDLE_RETURN_SECONDS = 10;
/** An extra relay the monitor starts polls at most this much less than the monitor's period, s. */
const SCALE_OUT_SLACK_SECONDS = 10;

/** Seconds between invocations of a `rate(...)` schedule expression; undefined for cron and at. */
export function schedulePeriodSeconds(expression: string): number | undefined {
  const m = /^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$/.exec(expression);
  if (!m) return undefined;
  const unit = { minute: 60, minutes: 60, hour: 3_600, hours: 3_600, day: 86_400, days: 86_400 };
  return Number(m[1]) * unit[m[2] as keyof typeof unit];
}

/**
 * Where functions connect to Postgres, with IAM authentication and verified TLS: exactly one of
 * `proxy`, `instance` or `cluster`.
 *
 * - **`proxy`** (RDS Proxy): connections are pooled by the proxy across invocations and functions,
 *   so the database sees the proxy's connections, not one per Lambda container. It costs about
 *   $22 a month at the minimum (2 vCPUs billed), and the client runs in transaction-pooler mode (no
 *   named prepared statements, one statement in flight per connection).
 * - **`instance`** or **`cluster`** (direct): each warm Lambda container keeps its own connections
 *   (the relay up to OUTBOX_PUBLISH_CONCURRENCY + 1, 5 by default; the monitor 2) for up to 5 idle
 *   minutes and 10 to 13 minutes in all, so the database's `max_connections` must cover every
 *   container at the peak; every new connection signs an IAM token, which RDS and Aurora throttle at
 *   200 new IAM-authenticated connections per second (docs/deploying.md#without-a-proxy-iam-straight-to-the-instance-or-cluster).
 */
export interface OutboxDatabaseTarget {
  /**
   * RDS Proxy. It must require IAM authentication and TLS, and be able to log in to the database as
   * the relay's and the monitor's users: with end-to-end IAM authentication (`DefaultAuthScheme:
   * IAM_AUTH`), its role needs `rds-db:connect` on the instance for {@link OutboxRelay.databaseUsers};
   * otherwise it needs a Secrets Manager secret for each of them.
   * @default none: give `instance` or `cluster` instead
   */
  readonly proxy?: rds.IDatabaseProxy;
  /**
   * An RDS for PostgreSQL instance, reached directly (no proxy) with IAM authentication, which must
   * be on (`iamAuthentication: true`; an instance of the same app gets it from the construct's grant).
   * An imported instance needs `instanceEndpointAddress`, `port` and `instanceResourceId` (the
   * `rds-db:connect` ARN names it: `dbuser:db-…/<user>`).
   * @default none
   */
  readonly instance?: rds.IDatabaseInstance;
  /**
   * An Aurora PostgreSQL cluster, reached directly at its writer (cluster) endpoint with IAM
   * authentication, which must be on (`iamAuthentication: true`). An imported cluster needs
   * `clusterEndpointAddress`, `port` and `clusterResourceIdentifier` (`dbuser:cluster-…/<user>`).
   * @default none
   */
  readonly cluster?: rds.IDatabaseCluster;
}

/** How the functions reach Postgres: see {@link OutboxDatabaseTarget}. */
export interface OutboxDatabaseProps extends OutboxDatabaseTarget {
  /** Database name. */
  readonly databaseName: string;
  /**
   * Database user of the relay (its grants: shared/relay/operations/roles.ts).
   * @default 'outbox_relay' (DEFAULT_ROLES.relay)
   */
  readonly relayUser?: string;
  /**
   * Database user of the monitor (its grants: shared/relay/operations/roles.ts).
   * @default 'outbox_monitor' (DEFAULT_ROLES.monitor)
   */
  readonly monitorUser?: string;
}

/** How a function reaches Postgres, resolved from an {@link OutboxDatabaseTarget}. */
export interface OutboxDatabaseConnection {
  /** `proxy` through RDS Proxy, `direct` to an instance or a cluster. */
  readonly shape: 'proxy' | 'direct';
  /** Host name the functions connect to (and sign their IAM tokens for). */
  readonly host: string;
  /** Its port, as a string (a token until deploy time for an instance or a cluster of the app). */
  readonly port: string;
  /**
   * The variables a function needs to log in as `user`: `PGHOST`, `PGPORT`, `PGUSER`,
   * `OUTBOX_DB_IAM_AUTH=true`, `OUTBOX_DB_POOLER` (`transaction` behind the proxy, `none` direct) and
   * `NODE_EXTRA_CA_CERTS` (Lambda's CA bundle, which holds the Amazon RDS CAs).
   */
  environment(user: string): Record<string, string>;
  /** Grants `rds-db:connect` as `user`, on the proxy's id or the instance's or cluster's resource id. */
  grantConnect(grantee: iam.IGrantable, user: string): void;
}

/**
 * Resolves where functions connect and how they are allowed to; shared by {@link OutboxRelay} and
 * any function of your own that logs in the same way (the example consumer does).
 * @throws when the target names none or several of `proxy`, `instance` and `cluster`
 */
export function outboxDatabaseConnection(target: OutboxDatabaseTarget): OutboxDatabaseConnection {
  const given = (['proxy', 'instance', 'cluster'] as const).filter((k) => target[k] !== undefined);
  if (given.length !== 1) {
    throw new Error(
      `OutboxRelay: database must name exactly one of proxy, instance or cluster (got ${given.length === 0 ? 'none' : given.join(' and ')})`,
    );
  }
  const { proxy, instance, cluster } = target;
  const [host, port, grantConnect]: [string, string, OutboxDatabaseConnection['grantConnect']] = proxy
    ? // RDS Proxy listens on the engine's default port, 5432 for Postgres.
      [proxy.endpoint, '5432', (grantee, user) => proxy.grantConnect(grantee, user)]
    : instance
      ? [
          instance.dbInstanceEndpointAddress,
          instance.dbInstanceEndpointPort,
          (grantee, user) => instance.grantConnect(grantee, user),
        ]
      : [
          (cluster as rds.IDatabaseCluster).clusterEndpoint.hostname,
          Tokenization.stringifyNumber((cluster as rds.IDatabaseCluster).clusterEndpoint.port),
          (grantee, user) => (cluster as rds.IDatabaseCluster).grantConnect(grantee, user),
        ];
  const shape = proxy ? 'proxy' : 'direct';
  return {
    shape,
    host,
    port,
    environment: (user) => ({
      [EnvVar.pgHost]: host,
      [EnvVar.pgPort]: port,
      [EnvVar.pgUser]: user,
      [EnvVar.iamAuth]: 'true',
      // Behind the proxy, no session state (it would pin); direct, a session of our own: named
      // prepared statements and the statement timeout as a startup setting.
      [EnvVar.dbPooler]: shape === 'proxy' ? 'transaction' : 'none',
      [EnvVar.nodeExtraCaCerts]: LAMBDA_CA_BUNDLE,
    }),
    grantConnect,
  };
}

/**
 * Deploy-time migrations: applied by a CDK Trigger before the relay and monitor functions and their
 * schedules are created or updated. Each migration must work with the code already deployed
 * (expand/contract, see docs/deploying.md#migrations-on-update-expand-then-contract).
 */
export interface OutboxMigrationProps {
  /** Admin credentials (`username`, `password`, `port`) of the database, e.g. `instance.secret`. */
  readonly adminSecret: secretsmanager.ISecret;
  /**
   * Host of the database instance or the cluster's writer (migrations connect directly with the
   * admin secret, not through the IAM-only proxy).
   * @default the endpoint of `database.instance` or `database.cluster`; required with a proxy
   */
  readonly host?: string;
  /**
   * Security groups of the migrate function. The instance must accept them on its port, and they
   * must not be the relay's and monitor's groups: those reach the proxy only, and the migrate
   * function alone reaches the instance directly (it also needs Secrets Manager, through an
   * endpoint or NAT).
   */
  readonly securityGroups: ec2.ISecurityGroup[];
  /**
   * Constructs that must exist before migrating: the instance, the security group rules and the
   * endpoints the migrate function uses. The relay and monitor functions come after the migrations,
   * so list what they need as well (the proxy and its rules).
   * @default none
   */
  readonly executeAfter?: Construct[];
}

/** Props of {@link OutboxRelay}. */
export interface OutboxRelayProps {
  /**
   * VPC of the functions: they must reach the database (the proxy, or the instance or cluster) and
   * EventBridge (an interface endpoint, or NAT).
   */
  readonly vpc: ec2.IVpc;
  /**
   * Subnets of the functions.
   * @default the VPC's private subnets (isolated ones when there are no others)
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /**
   * Security groups of the relay and the monitor; the proxy (or, without one, the instance or the
   * cluster) must accept them on its port.
   */
  readonly securityGroups: ec2.ISecurityGroup[];
  readonly database: OutboxDatabaseProps;
  /**
   * Applies the schema and creates the database roles at deploy time.
   * @default no migrations (run `outbox migrate` yourself)
   */
  readonly migration?: OutboxMigrationProps;
  /**
   * The bus events are published to.
   * @default a new custom event bus
   */
  readonly eventBus?: events.IEventBus;
  /**
   * How often the relay is invoked; each invocation polls until close to its timeout.
   * @default rate(1 minute), EventBridge Scheduler's finest
   */
  readonly relaySchedule?: scheduler.ScheduleExpression;
  /**
   * Relay Lambda timeout (15 s – 15 min). Each invocation polls until 8 s before it, so it must
   * exceed the schedule's period by more than that, or nothing polls for part of every period;
   * the default exceeds it by 30 s, so that consecutive invocations overlap and a successor
   * that Scheduler or a cold start makes late still finds its predecessor polling (see
   * {@link RELAY_TIMEOUT_OVERLAP_SECONDS}). Synthesis fails on a timeout that leaves a gap, and
   * warns when the overlap is under 15 s.
   * @default the schedule's period + 30 s (90 s for rate(1 minute)); 90 s for a cron schedule
   */
  readonly relayTimeout?: Duration;
  /**
   * Relay memory, MB. Lambda gives CPU in proportion to memory (one vCPU at 1,769 MB), and the
   * relay is CPU-bound below the default: see {@link DEFAULT_RELAY_MEMORY_MB}.
   * @default 512 ({@link DEFAULT_RELAY_MEMORY_MB})
   */
  readonly relayMemorySize?: number;
  /**
   * Reserved concurrency of the relay: caps how many relays run at once (and so their database
   * connections), and keeps that many executions for it alone. Overlapping relays are safe (claims
   * are leased and skip locked rows), so this is about capacity, not correctness. Setting it fails
   * the deployment in an account whose concurrency quota cannot spare it (Lambda keeps a minimum
   * of unreserved concurrency; new accounts often have a quota of 10).
   * @default none: the relay uses the account's unreserved concurrency
   */
  readonly relayReservedConcurrency?: number;
  /**
   * Most relays polling at once, the scheduled one included. The monitor counts the claimable work
   * every minute (pending rows out of backoff, not leased, not held back behind a dead letter) and
   * invokes the relay function `ceil(claimable / backlogPerRelay) - 1` more times (at most
   * `maxRelays - 1`; none while the bus throttles), 500 ms apart, closer (down to 100 ms) when that
   * would take over 10 s, so every value is reached in one run; each extra relay returns once
   * nothing is pending, and within the monitor's period. 1 turns scale-out off. Bounded by
   * `databaseConnectionBudget` (checked at synth) and by `relayReservedConcurrency` when set.
   * @default 4 (or `relayReservedConcurrency - 1` when that is lower)
   */
  readonly maxRelays?: number;
  /**
   * Claimable events per relay: the monitor wants `ceil(claimable / backlogPerRelay)` relays. A relay
   * at the default 512 MB moves about 2,000 events/s at 20 ms bus latency (docs/performance.md#lambda-sizing-at-20-ms-bus-latency), so the
   * default starts a second relay when one would need more than about 15 s for the backlog.
   * @default 30,000
   */
  readonly backlogPerRelay?: number;
  /**
   * Database connections the relays and the monitor may open at once, together: with RDS Proxy,
   * its client connections; without it, the database's own. At the peak `maxRelays + 1` relays
   * run (the scheduled relay's successor starts while it still polls), each with a pool of
   * OUTBOX_PUBLISH_CONCURRENCY + 1 connections, plus the monitor's 2; synthesis fails when that
   * is more than this budget (see {@link OutboxRelay.databaseConnectionsAtPeak}).
   * @default 40
   */
  readonly databaseConnectionBudget?: number;
  /**
   * How often the monitor prunes and emits the lag metrics.
   * @default rate(1 minute)
   */
  readonly monitorSchedule?: scheduler.ScheduleExpression;
  /**
   * How the relay spends Lambda time. `steady`: every scheduled invocation polls until close to
   * its timeout, so some relay always polls and the lag is that of one pass (docs/performance.md).
   * `economy`: an invocation returns after {@link ECONOMY_IDLE_RETURN_SECONDS} without a claim
   * (`OUTBOX_IDLE_RETURN_SECONDS`), so a quiet outbox costs a few seconds of Lambda a minute
   * instead of the whole minute, and an event committed while no relay polls waits for the next
   * scheduled invocation: up to one schedule period of lag. `relaySettings.idleReturnSeconds`
   * overrides the quiet period.
   * @default 'steady'
   */
  readonly relayMode?: 'steady' | 'economy';
  /**
   * Settings of the relay function (docs/configuration.md#environment-variables), typed and validated at synth with
   * the relay's own schemas: a bad value fails `cdk synth` naming the setting.
   * @default none: the relay's defaults
   */
  readonly relaySettings?: RelayTuning;
  /**
   * Settings of the monitor function (retention, prune batch, its pool), validated at synth like
   * {@link relaySettings}.
   * @default none: the monitor's defaults
   */
  readonly monitorSettings?: MonitorTuning;
  /**
   * Extra `OUTBOX_*` variables of the relay, as strings. Validated at synth: each must be a relay
   * setting with a value its schema accepts.
   * @deprecated use {@link relaySettings}
   * @default none
   */
  readonly relayEnvironment?: Readonly<Record<string, string>>;
  /**
   * Extra `OUTBOX_*` variables of the monitor, as strings; validated at synth like {@link relayEnvironment}.
   * @deprecated use {@link monitorSettings}
   * @default none
   */
  readonly monitorEnvironment?: Readonly<Record<string, string>>;
  /**
   * CloudWatch namespace of the metrics.
   * @default 'Outbox'
   */
  readonly metricNamespace?: string;
  /**
   * Oldest pending event age that raises the lag alarm.
   * @default 5 minutes
   */
  readonly lagAlarmThreshold?: Duration;
  /**
   * Topic every alarm notifies. Its policy must let `cloudwatch.amazonaws.com` publish, and if it is
   * encrypted, its key policy must let `cloudwatch.amazonaws.com` use `kms:Decrypt` and
   * `kms:GenerateDataKey*` (an AWS managed `alias/aws/sns` key cannot: use a customer managed key).
   * @default a new SNS topic encrypted with a new KMS key, both with those statements
   */
  readonly alarmTopic?: sns.ITopic;
  /**
   * Log retention of the functions.
   * @default one month
   */
  readonly logRetention?: logs.RetentionDays;
  /**
   * Name of the CloudWatch dashboard. Dashboard names are global to the account (dashboards are not
   * regional), so a name must differ between regions as well as between stacks.
   * @default this construct's unique path followed by the region, e.g. `OutboxRelayDemo-Outbox-1a2b3c4d-eu-west-1`
   */
  readonly dashboardName?: string;
}

/** The relay, the monitor, their schedules, alarms and dashboard. */
export class OutboxRelay extends Construct {
  public readonly eventBus: events.IEventBus;
  /** The relay Lambda (a NodejsFunction when built from source, a Function on the package's bundle). */
  public readonly relayFunction: lambda.Function;
  public readonly monitorFunction: lambda.Function;
  public readonly migrateFunction: lambda.Function | undefined;
  public readonly relaySchedule: scheduler.Schedule;
  public readonly monitorSchedule: scheduler.Schedule;
  public readonly alarmTopic: sns.ITopic;
  public readonly alarms: {
    readonly lag: cloudwatch.Alarm;
    readonly deadLetters: cloudwatch.Alarm;
    readonly relayErrors: cloudwatch.Alarm;
    readonly relayThrottles: cloudwatch.Alarm;
    readonly monitorErrors: cloudwatch.Alarm;
    /** Only with a proxy (`database.proxy`). */
    readonly proxyPinnedSessions?: cloudwatch.Alarm;
    /** Inbox events parked (wait-for-gap, `onGapTimeout: 'park'`) and awaiting an operator. */
    readonly inboxParked: cloudwatch.Alarm;
  };
  public readonly dashboard: cloudwatch.Dashboard;
  /** How the functions reach the database: through the proxy, or directly (see {@link OutboxDatabaseTarget}). */
  public readonly databaseConnection: OutboxDatabaseConnection;
  /**
   * The database users the relay and the monitor log in as. With RDS Proxy's end-to-end IAM
   * authentication, the proxy's role must be allowed `rds-db:connect` to the instance as these users.
   */
  public readonly databaseUsers: { readonly relay: string; readonly monitor: string };
  /** Most relays polling at once, the scheduled one included ({@link OutboxRelayProps.maxRelays}). */
  public readonly maxRelays: number;
  /**
   * Database connections the relays and the monitor open at most, together: `(maxRelays + 1) ×
   * (OUTBOX_PUBLISH_CONCURRENCY + 1) + 2` (the `+ 1` relay: the scheduled relay's successor starts
   * while it still polls). Within {@link OutboxRelayProps.databaseConnectionBudget}.
   */
  public readonly databaseConnectionsAtPeak: number;

  constructor(scope: Construct, id: string, props: OutboxRelayProps) {
    super(scope, id);
    validate(props);
    const settings = functionSettings(props);
    const database = outboxDatabaseConnection(props.database);
    this.databaseConnection = database;
    if (props.database.proxy) warnOnProxyAuth(this, props.database.proxy);
    if (props.database.cluster) warnOnClusterAuth(this, props.database.cluster);
    const relayScheduleExpression =
      props.relaySchedule ?? scheduler.ScheduleExpression.rate(Duration.minutes(1));
    const monitorScheduleExpression =
      props.monitorSchedule ?? scheduler.ScheduleExpression.rate(Duration.minutes(1));
    const timeout = relayTimeoutFor(this, relayScheduleExpression, props.relayTimeout);
    const scale = scaleOutBounds(this, props, settings);
    this.maxRelays = scale.maxRelays;
    this.databaseConnectionsAtPeak = scale.connectionsAtPeak;
    const namespace = props.metricNamespace ?? DEFAULT_METRIC_NAMESPACE;
    this.databaseUsers = {
      relay: props.database.relayUser ?? DEFAULT_ROLES.relay,
      monitor: props.database.monitorUser ?? DEFAULT_ROLES.monitor,
    };
    this.eventBus = props.eventBus ?? new events.EventBus(this, 'Bus');
    const fn = functionFactory(this, props);
    const dbEnvironment = (user: string) => ({
      ...database.environment(user),
      [EnvVar.pgDatabase]: props.database.databaseName,
      [EnvVar.metricNamespace]: namespace,
    });

    this.relayFunction = this.createRelayFunction(fn, props, settings.relay, dbEnvironment, timeout);
    database.grantConnect(this.relayFunction, this.databaseUsers.relay);
    const scaleOutSeconds = scaleOutSecondsFor(monitorScheduleExpression, timeout);
    this.monitorFunction = this.createMonitorFunction(fn, props, settings, dbEnvironment, scaleOutSeconds);
    database.grantConnect(this.monitorFunction, this.databaseUsers.monitor);
    if (this.maxRelays > 1) this.grantScaleOut();
    const schedules = this.createSchedules(relayScheduleExpression, monitorScheduleExpression, props);
    this.relaySchedule = schedules.relay;
    this.monitorSchedule = schedules.monitor;
    this.migrateFunction = props.migration
      ? this.createMigration(fn, props, props.migration, database)
      : undefined;
    this.acknowledgeManagedPolicies();

    this.alarmTopic = props.alarmTopic ?? this.createAlarmTopic();
    this.alarms = this.createAlarms(props, namespace);
    this.dashboard = this.createDashboard(props, namespace);
  }

  /** The relay function, allowed to put events on the bus; scheduled invocations are not retried. */
  private createRelayFunction(
    fn: FunctionFactory,
    props: OutboxRelayProps,
    relayEnvironment: Record<string, string>,
    dbEnvironment: (user: string) => Record<string, string>,
    timeout: Duration,
  ): lambda.Function {
    const relay = fn('RelayFunction', 'relay', {
      memorySize: props.relayMemorySize ?? DEFAULT_RELAY_MEMORY_MB,
      timeout,
      ...SCHEDULED_INVOKE,
      reservedConcurrentExecutions: props.relayReservedConcurrency,
      environment: {
        ...relayEnvironment,
        ...dbEnvironment(this.databaseUsers.relay),
        [EnvVar.eventBusName]: this.eventBus.eventBusName,
        [EnvVar.powertoolsServiceName]: ServiceName.relay,
        NODE_OPTIONS: '--enable-source-maps',
      },
      description: 'Outbox relay: claims leased outbox rows and publishes them with PutEvents',
    });
    this.eventBus.grantPutEventsTo(relay);
    return relay;
  }

  /** The monitor function, told how to scale the relays out when {@link maxRelays} > 1. */
  private createMonitorFunction(
    fn: FunctionFactory,
    props: OutboxRelayProps,
    settings: FunctionSettings,
    dbEnvironment: (user: string) => Record<string, string>,
    scaleOutSeconds: number,
  ): lambda.Function {
    return fn('MonitorFunction', 'monitor', {
      timeout: Duration.minutes(1),
      ...SCHEDULED_INVOKE,
      environment: {
        ...settings.monitor,
        ...(this.maxRelays > 1
          ? {
              [EnvVar.relayFunctionName]: this.relayFunction.functionName,
              [EnvVar.maxRelays]: String(this.maxRelays),
              [EnvVar.backlogPerRelay]: String(props.backlogPerRelay ?? DEFAULT_BACKLOG_PER_RELAY),
              [EnvVar.scaleOutSeconds]: String(scaleOutSeconds),
              // The relay's: whether rows behind a dead letter are claimable (scale-out.ts).
              [EnvVar.ordering]: readSetting(EnvVar.ordering, settings.relay),
              [EnvVar.deadLetterPolicy]: readSetting(EnvVar.deadLetterPolicy, settings.relay),
            }
          : {}),
        ...dbEnvironment(this.databaseUsers.monitor),
        [EnvVar.powertoolsServiceName]: ServiceName.monitor,
        NODE_OPTIONS: '--enable-source-maps',
      },
      description: 'Outbox monitor: prunes old rows and emits lag and backlog metrics',
    });
  }

  /** Lets the monitor invoke the relay function to start extra relays. */
  private grantScaleOut(): void {
    this.relayFunction.grantInvoke(this.monitorFunction);
    if (!this.monitorFunction.role) return;
    const relayId = Stack.of(this).getLogicalId(this.relayFunction.node.defaultChild as lambda.CfnFunction);
    Validations.of(this.monitorFunction.role).acknowledge({
      id: `AwsSolutions::AwsSolutions-IAM5[Resource::<${relayId}.Arn>:*]`,
      reason:
        'grantInvoke allows the relay function and its versions (function:*) so the monitor can start extra relays; it is still this one function',
    });
  }

  /** The relay's and the monitor's schedules, under one Scheduler role. */
  private createSchedules(
    relayExpression: scheduler.ScheduleExpression,
    monitorExpression: scheduler.ScheduleExpression,
    props: OutboxRelayProps,
  ): { relay: scheduler.Schedule; monitor: scheduler.Schedule } {
    // One role for both schedules; each target grants it invoke on its own function.
    const schedulerRole = new iam.Role(this, 'SchedulerRole', {
      assumedBy: new iam.ServicePrincipal('scheduler.amazonaws.com'),
      description: 'EventBridge Scheduler: invoke the outbox relay and monitor',
    });
    for (const f of [this.relayFunction, this.monitorFunction]) {
      const logicalId = Stack.of(this).getLogicalId(f.node.defaultChild as lambda.CfnFunction);
      Validations.of(schedulerRole).acknowledge({
        id: `AwsSolutions::AwsSolutions-IAM5[Resource::<${logicalId}.Arn>:*]`,
        reason:
          'The Scheduler Lambda target grants invoke on the function and its versions (function:*); it is still this one function',
      });
    }
    const relay = new scheduler.Schedule(this, 'RelaySchedule', {
      schedule: relayExpression,
      target: new targets.LambdaInvoke(this.relayFunction, { retryAttempts: 0, role: schedulerRole }),
      description:
        props.relayMode === 'economy'
          ? 'Invokes the outbox relay; each invocation polls until it has been idle for a while (economy mode)'
          : 'Invokes the outbox relay; each invocation polls until close to its timeout',
    });
    const monitor = new scheduler.Schedule(this, 'MonitorSchedule', {
      schedule: monitorExpression,
      target: new targets.LambdaInvoke(this.monitorFunction, { retryAttempts: 0, role: schedulerRole }),
      description: 'Invokes the outbox monitor: pruning and lag metrics',
    });
    // The schedules start only once their role's policy (added by the targets above) exists: an
    // invocation before that is denied, and with no retries it is simply lost. On the policy only:
    // the role itself is already a dependency through RoleArn.
    const schedulerPolicy = schedulerRole.node.findChild('DefaultPolicy');
    for (const s of [relay, monitor]) s.node.addDependency(schedulerPolicy);
    return { relay, monitor };
  }

  /** The deploy-time migrate function and the Trigger that runs it before the functions change. */
  private createMigration(
    fn: FunctionFactory,
    props: OutboxRelayProps,
    migration: OutboxMigrationProps,
    database: OutboxDatabaseConnection,
  ): lambda.Function {
    const migrate = fn(
      'MigrateFunction',
      'migrate',
      {
        timeout: Duration.minutes(5),
        environment: {
          [EnvVar.adminSecretArn]: migration.adminSecret.secretArn,
          [EnvVar.adminHost]: migration.host ?? database.host,
          [EnvVar.adminDatabase]: props.database.databaseName,
          [EnvVar.relayRole]: this.databaseUsers.relay,
          [EnvVar.monitorRole]: this.databaseUsers.monitor,
          [EnvVar.migrationsDir]: '/var/task/migrations',
          [EnvVar.nodeExtraCaCerts]: LAMBDA_CA_BUNDLE,
          NODE_OPTIONS: '--enable-source-maps',
        },
        description: 'Outbox migrations: schema and least-privilege roles, run at deploy time',
        securityGroups: migration.securityGroups,
      },
      {
        ...OUTBOX_BUNDLING,
        // The numbered SQL files travel with the code (node-pg-migrate reads them from a folder);
        // the pre-built bundle carries them the same way (scripts/build.ts).
        commandHooks: {
          beforeBundling: () => [],
          beforeInstall: () => [],
          afterBundling: (inputDir: string, outputDir: string) => [
            `cp -r "${inputDir}/migrations" "${outputDir}/migrations"`,
          ],
        },
      },
    );
    migration.adminSecret.grantRead(migrate);
    // Migrations run before the functions and their schedules are created or updated, so new code
    // never meets the old schema. The old code does meet the new schema while the Trigger runs:
    // migrations must be expand/contract (docs/deploying.md#migrations-on-update-expand-then-contract).
    new triggers.Trigger(this, 'MigrateTrigger', {
      handler: migrate,
      executeAfter: migration.executeAfter ?? [],
      executeBefore: [this.relayFunction, this.monitorFunction, this.relaySchedule, this.monitorSchedule],
      executeOnHandlerChange: true,
      timeout: Duration.minutes(5),
    });
    return migrate;
  }

  /** cdk-nag: the AWS-managed execution policies every VPC Lambda needs. */
  private acknowledgeManagedPolicies(): void {
    for (const f of [this.relayFunction, this.monitorFunction, this.migrateFunction]) {
      if (!f?.role) continue;
      for (const policy of ['AWSLambdaBasicExecutionRole', 'AWSLambdaVPCAccessExecutionRole']) {
        Validations.of(f.role).acknowledge({
          id: `AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/${policy}]`,
          reason: `${policy} is the AWS-maintained minimum for a VPC Lambda: its own log group and its network interfaces (whose ids are not known in advance)`,
        });
      }
    }
  }

  /** A custom metric under the dimension its emitting service sets (names.ts). */
  private metric(namespace: string, name: MetricName, statistic: string, period = Duration.minutes(1)) {
    return new cloudwatch.Metric({
      namespace,
      metricName: name,
      dimensionsMap: { [METRIC_DIMENSION]: METRIC_SERVICE[name] },
      statistic,
      period,
    });
  }

  /** The alarms, each notifying {@link alarmTopic}. */
  private createAlarms(props: OutboxRelayProps, namespace: string): OutboxRelay['alarms'] {
    const metric = (name: MetricName, statistic: string, period?: Duration) =>
      this.metric(namespace, name, statistic, period);
    const alarm = (name: string, a: cloudwatch.AlarmProps) => {
      const created = new cloudwatch.Alarm(this, name, a);
      created.addAlarmAction(new cwActions.SnsAction(this.alarmTopic));
      return created;
    };
    const lagThreshold = (props.lagAlarmThreshold ?? Duration.minutes(5)).toSeconds();
    return {
      lag: alarm('LagAlarm', {
        alarmDescription: `The oldest pending outbox event is older than ${lagThreshold} s, or the monitor stopped reporting. Run: outbox status`,
        metric: metric(MetricName.OldestPendingAge, 'Maximum'),
        threshold: lagThreshold,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: 3,
        datapointsToAlarm: 3,
        // No data means no monitor: that must alarm too.
        treatMissingData: cloudwatch.TreatMissingData.BREACHING,
      }),
      deadLetters: alarm('DeadLetterAlarm', {
        alarmDescription: 'Outbox events were dead-lettered. Run: outbox dead-letters list',
        metric: metric(MetricName.DeadLettered, 'Maximum', Duration.minutes(5)),
        threshold: 0,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      relayErrors: alarm('RelayErrorAlarm', {
        alarmDescription: 'Relay invocations failed. See the relay log group.',
        metric: this.relayFunction.metricErrors({ period: Duration.minutes(5), statistic: 'Sum' }),
        threshold: 1,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      relayThrottles: alarm('RelayThrottleAlarm', {
        alarmDescription:
          'PutEvents throttled the relay. Consider a quota increase or lower OUTBOX_PUBLISH_CONCURRENCY.',
        metric: metric(MetricName.Throttled, 'Sum', Duration.minutes(5)),
        threshold: 0,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      monitorErrors: alarm('MonitorErrorAlarm', {
        alarmDescription: 'Monitor invocations failed (pruning or metrics). See the monitor log group.',
        metric: this.monitorFunction.metricErrors({ period: Duration.minutes(5), statistic: 'Sum' }),
        threshold: 1,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
      // Pinning is RDS Proxy's: a direct connection is a session of its own anyway.
      ...(props.database.proxy && {
        proxyPinnedSessions: alarm('ProxyPinnedSessionsAlarm', {
          alarmDescription: 'RDS Proxy connections are pinned: some client sets session state.',
          metric: new cloudwatch.Metric({
            namespace: 'AWS/RDS',
            metricName: 'DatabaseConnectionsCurrentlySessionPinned',
            dimensionsMap: { ProxyName: props.database.proxy.dbProxyName },
            statistic: 'Maximum',
            period: Duration.minutes(5),
          }),
          threshold: 0,
          comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
          evaluationPeriods: 3,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        }),
      }),
      // The monitor counts parked inbox records of every consumer whose inbox lives in this
      // database; it stays in alarm until each is replayed or discarded.
      inboxParked: alarm('InboxParkedAlarm', {
        alarmDescription:
          'Inbox events are parked, waiting for an operator. Run: outbox inbox parked list --consumer <name>',
        metric: metric(MetricName.InboxParked, 'Maximum', Duration.minutes(5)),
        threshold: 0,
        comparisonOperator: cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
        evaluationPeriods: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      }),
    };
  }

  /** The dashboard: lag, throughput, backlog and relay health. */
  private createDashboard(props: OutboxRelayProps, namespace: string): cloudwatch.Dashboard {
    const metric = (name: MetricName, statistic: string) => this.metric(namespace, name, statistic);
    return new cloudwatch.Dashboard(this, 'Dashboard', {
      dashboardName:
        props.dashboardName ??
        `${Names.uniqueResourceName(this, { maxLength: 200, separator: '-' })}-${Stack.of(this).region}`,
      widgets: [
        [
          new cloudwatch.GraphWidget({
            title: 'Lag: oldest pending event (s)',
            left: [metric(MetricName.OldestPendingAge, 'Maximum')],
            width: 12,
          }),
          new cloudwatch.GraphWidget({
            title: 'Throughput (events published)',
            left: [metric(MetricName.Published, 'Sum')],
            width: 12,
          }),
        ],
        [
          new cloudwatch.GraphWidget({
            title: 'Backlog',
            left: [metric(MetricName.Pending, 'Maximum'), metric(MetricName.InFlight, 'Maximum')],
            right: [
              metric(MetricName.DeadLettered, 'Maximum'),
              metric(MetricName.InboxParked, 'Maximum'),
              metric(MetricName.ExtraRelays, 'Sum'),
            ],
            width: 12,
          }),
          new cloudwatch.GraphWidget({
            title: 'Relay health',
            left: [
              metric(MetricName.Retried, 'Sum'),
              metric(MetricName.Throttled, 'Sum'),
              metric(MetricName.BackPressure, 'Sum'),
              metric(MetricName.LeaseLost, 'Sum'),
              metric(MetricName.LeaseRenewals, 'Sum'),
            ],
            right: [metric(MetricName.PutEventsLatency, 'Average')],
            width: 12,
          }),
        ],
      ],
    });
  }

  /**
   * An SNS topic encrypted with its own key, which CloudWatch alarms of this account and region may
   * publish to. Alarms publish as the service principal `cloudwatch.amazonaws.com`, so both the topic
   * policy (the SSL-only policy replaces SNS's default one, which allowed the account) and the key
   * policy must allow it; otherwise every alarm changes state and no notification is ever sent. The
   * aws:SourceAccount and aws:SourceArn conditions keep other accounts' alarms out (the SNS
   * developer guide's key management page, "compatibility with AWS services").
   */
  private createAlarmTopic(): sns.Topic {
    const stack = Stack.of(this);
    const cloudwatchPrincipal = new iam.ServicePrincipal('cloudwatch.amazonaws.com');
    const fromOurAlarms = {
      StringEquals: { 'aws:SourceAccount': stack.account },
      ArnLike: {
        'aws:SourceArn': stack.formatArn({
          service: 'cloudwatch',
          resource: 'alarm',
          resourceName: '*',
          arnFormat: ArnFormat.COLON_RESOURCE_NAME,
        }),
      },
    };
    const key = new kms.Key(this, 'AlarmTopicKey', {
      enableKeyRotation: true,
      description: 'Outbox relay alarm topic',
    });
    key.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchAlarmsPublishToTheAlarmTopic',
        principals: [cloudwatchPrincipal],
        actions: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        // In a key policy "*" means this key.
        resources: ['*'],
        conditions: fromOurAlarms,
      }),
    );
    const topic = new sns.Topic(this, 'AlarmTopic', {
      displayName: 'Outbox relay alarms',
      masterKey: key,
      enforceSSL: true,
    });
    topic.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'CloudWatchAlarmsPublish',
        principals: [cloudwatchPrincipal],
        actions: ['sns:Publish'],
        resources: [topic.topicArn],
        conditions: fromOurAlarms,
      }),
    );
    return topic;
  }
}

/**
 * EventBridge Scheduler invokes asynchronously. Lambda's defaults would retry a failed invocation
 * twice and keep a throttled one for up to 6 hours; the next schedule is a minute away, so a
 * failed or late invocation is dropped instead (60 s is the shortest age Lambda accepts). A
 * failure still counts in the Errors metric that the error alarms watch.
 */
const SCHEDULED_INVOKE = { retryAttempts: 0, maxEventAge: Duration.minutes(1) } as const;

/** Makes one of the project's functions: Arm, Node 24, in the VPC, with a log group of its own. */
type FunctionFactory = (
  name: string,
  handler: HandlerName,
  extra: lambda.FunctionOptions,
  bundling?: nodejs.BundlingOptions,
) => lambda.Function;

/**
 * The {@link FunctionFactory} of a construct: a Function on the package's pre-built bundle when
 * there is one (the installed package), else a NodejsFunction bundled from source (a checkout).
 */
function functionFactory(scope: Construct, props: OutboxRelayProps): FunctionFactory {
  const logRetention = props.logRetention ?? logs.RetentionDays.ONE_MONTH;
  return (name, handler, extra, bundling = OUTBOX_BUNDLING) => {
    const options: lambda.FunctionOptions = {
      architecture: lambda.Architecture.ARM_64,
      memorySize: 256,
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets,
      securityGroups: props.securityGroups,
      logGroup: new logs.LogGroup(scope, `${name}Logs`, { retention: logRetention }),
      ...extra,
    };
    const runtime = lambda.Runtime.NODEJS_24_X;
    const bundle = prebuiltBundle(handler);
    if (bundle) {
      return new lambda.Function(scope, name, {
        ...options,
        runtime,
        code: lambda.Code.fromAsset(bundle),
        handler: 'index.handler',
      });
    }
    return new nodejs.NodejsFunction(scope, name, {
      ...options,
      runtime,
      entry: `${repoRoot}${HANDLER_ENTRIES[handler]}`,
      projectRoot: repoRoot,
      depsLockFilePath: `${repoRoot}package-lock.json`,
      bundling,
    });
  };
}

/** The relay's and the monitor's tunable variables, validated with the functions' own schemas. */
interface FunctionSettings {
  relay: Record<string, string>;
  monitor: Record<string, string>;
}

/**
 * The relay's and the monitor's settings from the props, as environment variables: the deprecated
 * string maps, then `relayMode`, then the typed settings (which win). Each is validated here, at
 * synth, with the schema the function applies at cold start.
 * @throws {OutboxConfigError} naming the prop and the setting, e.g. `relaySettings.batchSize (OUTBOX_BATCH_SIZE)`
 */
function functionSettings(props: OutboxRelayProps): FunctionSettings {
  return {
    relay: {
      ...checkEnvironment(RELAY_TUNING_VARS, props.relayEnvironment, 'relayEnvironment'),
      ...(props.relayMode === 'economy'
        ? { [EnvVar.idleReturnSeconds]: String(ECONOMY_IDLE_RETURN_SECONDS) }
        : {}),
      ...tuningToEnv(RELAY_TUNING_VARS, props.relaySettings, 'relaySettings'),
    },
    monitor: {
      ...checkEnvironment(MONITOR_TUNING_VARS, props.monitorEnvironment, 'monitorEnvironment'),
      ...tuningToEnv(MONITOR_TUNING_VARS, props.monitorSettings, 'monitorSettings'),
    },
  };
}

/**
 * How long an extra relay polls: the monitor's period less some slack, so that one minute's
 * extras have returned before the next minute's are started.
 */
function scaleOutSecondsFor(monitorSchedule: scheduler.ScheduleExpression, relayTimeout: Duration): number {
  const monitorPeriod = schedulePeriodSeconds(monitorSchedule.expressionString) ?? 60;
  return Math.max(10, Math.min(monitorPeriod - SCALE_OUT_SLACK_SECONDS, relayTimeout.toSeconds() - 10));
}

/**
 * The relay and the monitor log in through the proxy as their own database users with IAM tokens.
 * A proxy defined in this app that authenticates with Secrets Manager secrets (`iamAuth` with a
 * `secrets` list, no `defaultAuthScheme: IAM_AUTH`) refuses them at run time; say so at synth.
 * (An imported proxy cannot be inspected.)
 */
function warnOnProxyAuth(scope: Construct, proxy: rds.IDatabaseProxy): void {
  const cfn = proxy.node.defaultChild;
  if (!(cfn instanceof rds.CfnDBProxy) || cfn.defaultAuthScheme === 'IAM_AUTH') return;
  Annotations.of(scope).addWarningV2(
    'outbox-relay:proxy-auth',
    `The proxy ${proxy.node.path} authenticates to the database with secrets, so it refuses the relay's and the monitor's ` +
      'IAM logins as their own users. Set defaultAuthScheme: rds.DefaultAuthScheme.IAM_AUTH on it and grant its role ' +
      'rds-db:connect for OutboxRelay.databaseUsers (docs/deploying.md#how-the-proxy-logs-in-end-to-end-iam-authentication).',
  );
}

/**
 * The relay's timeout: as given, or the schedule's period plus {@link RELAY_TIMEOUT_OVERLAP_SECONDS}.
 * @throws when the timeout leaves a gap in every period (nothing polls between an invocation's
 *   last poll and its successor's first)
 */
function relayTimeoutFor(
  scope: Construct,
  schedule: scheduler.ScheduleExpression,
  given: Duration | undefined,
): Duration {
  const period = schedulePeriodSeconds(schedule.expressionString);
  const stopsBefore = RELAY_STOPS_POLLING_BEFORE_TIMEOUT_MS / 1000;
  if (period === undefined) {
    Annotations.of(scope).addWarningV2(
      'outbox-relay:relay-schedule-overlap',
      `The relay schedule ${schedule.expressionString} is not a rate: the construct cannot check that each relay invocation is still polling when the next one starts (its timeout, less ${stopsBefore} s, must exceed the time between invocations).`,
    );
    return given ?? Duration.seconds(90);
  }
  const timeout = given ?? Duration.seconds(Math.min(900, period + RELAY_TIMEOUT_OVERLAP_SECONDS));
  const overlap = timeout.toSeconds() - stopsBefore - period;
  if (overlap <= 0) {
    throw new Error(
      `OutboxRelay: relayTimeout ${timeout.toSeconds()} s leaves a gap of ${-overlap} s every ${period} s: an invocation stops polling ${stopsBefore} s before its timeout, and the next one starts ${period} s after it (${schedule.expressionString}). Make relayTimeout at least ${period + stopsBefore + MIN_OVERLAP_SECONDS} s, or leave it unset (${period + RELAY_TIMEOUT_OVERLAP_SECONDS} s)`,
    );
  }
  if (overlap < MIN_OVERLAP_SECONDS) {
    Annotations.of(scope).addWarningV2(
      'outbox-relay:relay-schedule-overlap',
      `relayTimeout ${timeout.toSeconds()} s overlaps consecutive relay invocations by only ${overlap} s: an invocation that Scheduler or a cold start delays by more leaves a time in which nothing polls. The default, ${period + RELAY_TIMEOUT_OVERLAP_SECONDS} s, overlaps them by ${RELAY_TIMEOUT_OVERLAP_SECONDS - stopsBefore} s.`,
    );
  }
  return timeout;
}

/**
 * How far the relays scale out, and the connections that makes at the peak.
 * @throws when they exceed the connection budget or the reserved concurrency, naming the props
 */
function scaleOutBounds(
  scope: Construct,
  props: OutboxRelayProps,
  settings: FunctionSettings,
): { maxRelays: number; connectionsAtPeak: number } {
  const reserved = props.relayReservedConcurrency;
  const budget = props.databaseConnectionBudget ?? DEFAULT_DATABASE_CONNECTION_BUDGET;
  if (!Number.isInteger(budget) || budget < 1) {
    throw new Error(
      `OutboxRelay: databaseConnectionBudget must be a whole number of at least 1 (got ${budget})`,
    );
  }
  const given = props.maxRelays;
  if (given !== undefined && (!Number.isInteger(given) || given < 1 || given > 100)) {
    throw new Error(`OutboxRelay: maxRelays must be a whole number from 1 to 100 (got ${given})`);
  }
  const backlog = props.backlogPerRelay;
  if (backlog !== undefined && (!Number.isInteger(backlog) || backlog < 1)) {
    throw new Error(`OutboxRelay: backlogPerRelay must be a whole number of at least 1 (got ${backlog})`);
  }
  // With reserved concurrency, the scheduled relay's successor and the extras share it: one
  // execution is kept for the successor, or it would be throttled while its predecessor polls.
  if (reserved !== undefined && given !== undefined && given + 1 > reserved) {
    throw new Error(
      `OutboxRelay: maxRelays ${given} needs relayReservedConcurrency of at least ${given + 1} (the scheduled relay's successor starts while it still polls); got ${reserved}`,
    );
  }
  if (reserved === 1) {
    Annotations.of(scope).addWarningV2(
      'outbox-relay:reserved-concurrency-gap',
      'relayReservedConcurrency 1 throttles each scheduled relay invocation until its predecessor has returned: nothing polls in between. Reserve at least 2.',
    );
  }
  const maxRelays =
    given ?? Math.max(1, Math.min(DEFAULT_MAX_RELAYS, (reserved ?? Number.POSITIVE_INFINITY) - 1));
  // Validated already (functionSettings); unset, the defaults the functions use.
  const concurrency = readSetting(EnvVar.publishConcurrency, settings.relay);
  const perRelay = poolSize(relayPoolSize(concurrency), settings.relay);
  const monitorPool = poolSize(MONITOR_POOL_SIZE, settings.monitor);
  const connectionsAtPeak = (maxRelays + 1) * perRelay + monitorPool;
  if (connectionsAtPeak > budget) {
    throw new Error(
      `OutboxRelay: at the peak ${maxRelays + 1} relays (maxRelays ${maxRelays}, plus the scheduled relay's successor) × ${perRelay} connections (${settings.relay[EnvVar.dbPoolSize] ? EnvVar.dbPoolSize : `OUTBOX_PUBLISH_CONCURRENCY ${concurrency} + 1`}) + ${monitorPool} for the monitor = ${connectionsAtPeak} database connections, over databaseConnectionBudget ${budget}: lower maxRelays or raise the budget`,
    );
  }
  return { maxRelays, connectionsAtPeak };
}

/**
 * Without a proxy the functions log in to the cluster itself with IAM tokens, which it refuses
 * unless IAM database authentication is on. A cluster defined in this app without
 * `iamAuthentication: true` gets a warning at synth (an imported one cannot be inspected; an
 * instance of the app is switched on by the construct's `grantConnect`).
 */
function warnOnClusterAuth(scope: Construct, cluster: rds.IDatabaseCluster): void {
  const cfn = cluster.node.defaultChild;
  if (!(cfn instanceof rds.CfnDBCluster) || cfn.enableIamDatabaseAuthentication === true) return;
  Annotations.of(scope).addWarningV2(
    'outbox-relay:cluster-iam-auth',
    `The cluster ${cluster.node.path} does not have IAM database authentication on, so it refuses the relay's and ` +
      "the monitor's IAM logins. Set iamAuthentication: true on it (docs/deploying.md#without-a-proxy-iam-straight-to-the-instance-or-cluster).",
  );
}

function validate(props: OutboxRelayProps): void {
  const timeout = props.relayTimeout?.toSeconds() ?? 90;
  if (timeout < 15 || timeout > 900) {
    throw new Error(`OutboxRelay: relayTimeout must be between 15 seconds and 15 minutes (got ${timeout} s)`);
  }
  if (props.securityGroups.length === 0) {
    throw new Error(
      'OutboxRelay: securityGroups must name at least one security group the database (or its proxy) accepts',
    );
  }
  if (props.migration) {
    if (props.migration.securityGroups.length === 0) {
      throw new Error(
        'OutboxRelay: migration.securityGroups must name at least one security group the instance accepts',
      );
    }
    const shared = props.migration.securityGroups.filter((g) => props.securityGroups.includes(g));
    if (shared.length > 0) {
      throw new Error(
        props.database.proxy
          ? "OutboxRelay: migration.securityGroups must not include the relay's and monitor's securityGroups (they would reach the instance directly, bypassing the proxy)"
          : "OutboxRelay: migration.securityGroups must not include the relay's and monitor's securityGroups (they would reach the admin secret's endpoint, which only the migrate function needs)",
      );
    }
  }
  if (props.migration && props.migration.host === undefined && props.database.proxy) {
    throw new Error(
      'OutboxRelay: migration.host is required with a proxy: the migrate function connects to the instance itself, with the admin secret',
    );
  }
  if (!/^[A-Za-z_][A-Za-z0-9_$]{0,62}$/.test(props.database.databaseName)) {
    throw new Error(
      `OutboxRelay: database.databaseName "${props.database.databaseName}" is not a valid Postgres name`,
    );
  }
  const memory = props.relayMemorySize ?? DEFAULT_RELAY_MEMORY_MB;
  if (memory < 128 || memory > 10_240) {
    throw new Error(`OutboxRelay: relayMemorySize must be 128–10240 MB (got ${memory})`);
  }
  const reserved = props.relayReservedConcurrency;
  if (reserved !== undefined && (!Number.isInteger(reserved) || reserved < 1)) {
    throw new Error(
      `OutboxRelay: relayReservedConcurrency must be a whole number of at least 1 (got ${reserved}); 0 would stop the relay`,
    );
  }
  const lag = props.lagAlarmThreshold?.toSeconds() ?? 300;
  if (lag < 60) throw new Error(`OutboxRelay: lagAlarmThreshold must be at least 1 minute (got ${lag} s)`);
}
