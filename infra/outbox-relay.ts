/**
 * `OutboxRelay`: everything the relay needs next to an existing Postgres — reached through RDS
 * Proxy, or directly on an RDS instance or Aurora cluster, with IAM authentication either way — the
 * relay and monitor Lambdas on EventBridge Scheduler schedules, the event bus, optional
 * deploy-time migrations, alarms wired to an SNS topic, and a dashboard.
 */
import { CfnOutput, Duration, Stack, Validations } from 'aws-cdk-lib';
import type * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as events from 'aws-cdk-lib/aws-events';
import type * as eventsv2 from 'aws-cdk-lib/aws-eventsv2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as targets from 'aws-cdk-lib/aws-scheduler-targets';
import type * as sns from 'aws-cdk-lib/aws-sns';
import * as triggers from 'aws-cdk-lib/triggers';
import { Construct } from 'constructs';
import { readSetting } from '../shared/platform/config.ts';
import { OutboxConfigError } from '../shared/platform/errors.ts';
import {
  DEFAULT_METRIC_NAMESPACE,
  DEFAULT_ROLES,
  EnvVar,
  HEARTBEAT_EVENT,
  LAMBDA_CA_BUNDLE,
  ServiceName,
} from '../shared/platform/names.ts';
import { OUTBOX_BUNDLING } from './bundling.ts';
import { checkSources, restrictCustomBusPutEvents, restrictPutEvents } from './bus-policy.ts';
import {
  createCustomBusAlarms,
  customEventBus,
  grantCustomBusPutEvents,
  type OutboxCustomBusAlarms,
  type OutboxCustomEventBus,
  validateCustomEventBus,
} from './custom-event-bus.ts';
import {
  inboxConsumersEnvironment,
  type OutboxDatabaseConnection,
  type OutboxMigrationProps,
  outboxDatabaseConnection,
  warnOnClusterAuth,
  warnOnProxyAuth,
} from './database.ts';
import { type FunctionFactory, functionFactory, SCHEDULED_INVOKE } from './functions.ts';
import { createAlarms, createAlarmTopic, createDashboard, type OutboxAlarms } from './observability.ts';
import {
  DEFAULT_BACKLOG_PER_RELAY,
  DEFAULT_CUSTOM_BUS_RETENTION_DAYS,
  DEFAULT_RELAY_MEMORY_MB,
  type OutboxRelayProps,
} from './props.ts';
import { warnOnRelayReplayWindow } from './retention.ts';
import {
  type FunctionSettings,
  functionSettings,
  keepsNoPublishedHistory,
  relayTimeoutFor,
  scaleOutBounds,
  scaleOutSecondsFor,
  validate,
} from './sizing.ts';

/** The relay, the monitor, their schedules, alarms and dashboard. */
export class OutboxRelay extends Construct {
  /** Which bus the relay publishes to: `classic` (an EventBridge event bus) or `custom` (a Custom Event Bus, EventsV2). */
  public readonly busKind: 'classic' | 'custom';
  /**
   * The Custom Event Bus's ARN (`OUTBOX_EVENT_BUS_ARN` of the relay; `customEventBusArn` of an
   * `OutboxConsumer`); undefined with a classic bus.
   */
  public readonly customEventBusArn: string | undefined;
  /** The Custom Event Bus the construct created; undefined with a classic bus or an existing one. */
  public readonly customEventBus: eventsv2.CfnEventBus | undefined;
  /**
   * How long the created Custom Event Bus keeps events for a replay, days
   * (`customEventBus.retentionDays`); undefined with a classic bus or an existing one. An
   * `OutboxConsumer` of this bus refuses a retention over its inbox's (`inboxRetentionDays`).
   */
  public readonly customEventBusRetentionDays: number | undefined;
  /**
   * How long the monitor keeps inbox records, days (`monitorSettings.inboxRetentionDays`,
   * `OUTBOX_INBOX_RETENTION_DAYS`; 30 by default). An `OutboxConsumer` of the app whose inbox is in
   * this relay's database refuses an `inboxRetentionDays` above it; the relay warns at synth when
   * its Custom Event Bus or an archive of its bus keeps events longer (infra/retention.ts).
   */
  public readonly monitorInboxRetentionDays: number;
  /**
   * The Custom Event Bus's resource policy, with the statement of {@link OutboxRelayProps.sources};
   * undefined with a classic bus, `restrictPutEvents: false`, or an existing Custom Event Bus.
   */
  public readonly customEventBusPolicy: eventsv2.CfnResourcePolicy | undefined;
  /** Alarms on the Custom Event Bus's subscribers (`AWS/EventsV2`); undefined with a classic bus. */
  public readonly customBusAlarms: OutboxCustomBusAlarms | undefined;
  private readonly classicBus: events.IEventBus | undefined;
  private readonly custom: OutboxCustomEventBus | undefined;
  /**
   * The statement of the bus's resource policy that denies PutEvents of the outbox's sources to
   * every principal but the relay (see {@link OutboxRelayProps.sources}); undefined when none was
   * added (`restrictPutEvents: false`, or a bus passed in without `sources`).
   */
  public readonly busPolicy: events.CfnEventBusPolicy | undefined;
  /** The relay Lambda (a NodejsFunction when built from source, a Function on the package's bundle). */
  public readonly relayFunction: lambda.Function;
  public readonly monitorFunction: lambda.Function;
  public readonly migrateFunction: lambda.Function | undefined;
  public readonly relaySchedule: scheduler.Schedule;
  public readonly monitorSchedule: scheduler.Schedule;
  public readonly alarmTopic: sns.ITopic;
  public readonly alarms: OutboxAlarms;
  public readonly dashboard: cloudwatch.Dashboard;
  /** How the functions reach the database: through the proxy, or directly (see {@link OutboxDatabaseTarget}). */
  public readonly databaseConnection: OutboxDatabaseConnection;
  /** The outbox's database (`database.databaseName`), whose inbox tables the monitor prunes and counts. */
  public readonly databaseName: string;
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
  /**
   * How often the monitor enqueues a heartbeat ({@link OutboxRelayProps.heartbeat}); undefined when
   * it sends none. The app's `OutboxConsumer`s on this relay's bus follow it.
   */
  public readonly heartbeatInterval: Duration | undefined;

  /**
   * The classic bus events are published to (the one passed as `eventBus`, or the one created).
   * @throws {OutboxConfigError} (`eventBus`) when the relay publishes to a Custom Event Bus: use {@link customEventBusArn}
   */
  public get eventBus(): events.IEventBus {
    if (!this.classicBus) {
      throw new OutboxConfigError(
        'eventBus',
        'this OutboxRelay publishes to a Custom Event Bus (customEventBus), which is not a classic event bus: use relay.customEventBusArn (OutboxConsumer: customEventBusArn)',
      );
    }
    return this.classicBus;
  }

  constructor(scope: Construct, id: string, props: OutboxRelayProps) {
    super(scope, id);
    validate(props);
    checkSources(props.sources);
    validateCustomEventBus(props);
    const settings = functionSettings(props);
    const database = outboxDatabaseConnection(props.database);
    this.databaseConnection = database;
    this.databaseName = props.database.databaseName;
    if (props.database.proxy) warnOnProxyAuth(this, props.database.proxy);
    if (props.database.cluster) warnOnClusterAuth(this, props.database.cluster);
    const relayScheduleExpression =
      props.relaySchedule ?? scheduler.ScheduleExpression.rate(Duration.minutes(1));
    const monitorScheduleExpression =
      props.monitorSchedule ?? scheduler.ScheduleExpression.rate(Duration.minutes(1));
    const timeout = relayTimeoutFor(this, relayScheduleExpression, props.relayTimeout);
    const scale = scaleOutBounds(this, props, settings);
    this.maxRelays = scale.maxRelays;
    this.heartbeatInterval = heartbeatIntervalOf(props);
    this.databaseConnectionsAtPeak = scale.connectionsAtPeak;
    const namespace = props.metricNamespace ?? DEFAULT_METRIC_NAMESPACE;
    this.databaseUsers = {
      relay: props.database.relayUser ?? DEFAULT_ROLES.relay,
      monitor: props.database.monitorUser ?? DEFAULT_ROLES.monitor,
    };
    this.busKind = props.customEventBus ? 'custom' : 'classic';
    this.custom = props.customEventBus ? customEventBus(this, props.customEventBus) : undefined;
    this.customEventBusArn = this.custom?.arn;
    this.customEventBus = this.custom?.bus;
    this.customEventBusRetentionDays =
      this.custom?.bus === undefined
        ? undefined
        : (props.customEventBus?.retentionDays ?? DEFAULT_CUSTOM_BUS_RETENTION_DAYS);
    this.classicBus = this.custom ? undefined : (props.eventBus ?? new events.EventBus(this, 'Bus'));
    this.monitorInboxRetentionDays = readSetting(EnvVar.inboxRetentionDays, settings.monitor);
    warnOnRelayReplayWindow(
      this,
      this.monitorInboxRetentionDays,
      this.customEventBusRetentionDays,
      () => this.classicBus,
    );
    const fn = functionFactory(this, props);
    const dbEnvironment = (user: string) => ({
      ...database.environment(user),
      [EnvVar.pgDatabase]: props.database.databaseName,
      [EnvVar.metricNamespace]: namespace,
    });

    this.relayFunction = this.createRelayFunction(fn, props, settings.relay, dbEnvironment, timeout);
    database.grantConnect(this.relayFunction, this.databaseUsers.relay);
    const relayRole = this.relayFunction.role as iam.IRole;
    const policyProps = { ...props, sources: policySources(props.sources, this.heartbeatInterval) };
    this.busPolicy = this.classicBus
      ? restrictPutEvents(this, this.classicBus, props.eventBus === undefined, policyProps, relayRole)
      : undefined;
    this.customEventBusPolicy = this.custom
      ? restrictCustomBusPutEvents(
          this,
          this.custom.arn,
          this.custom.bus !== undefined,
          policyProps,
          relayRole,
        )
      : undefined;
    const scaleOutSeconds = scaleOutSecondsFor(monitorScheduleExpression, timeout);
    this.monitorFunction = this.createMonitorFunction(fn, props, settings, dbEnvironment, scaleOutSeconds);
    database.grantConnect(this.monitorFunction, this.databaseUsers.monitor);
    if (this.maxRelays > 1) this.grantScaleOut();
    const schedules = this.createSchedules(relayScheduleExpression, monitorScheduleExpression, props);
    this.relaySchedule = schedules.relay;
    this.monitorSchedule = schedules.monitor;
    this.migrateFunction = props.migration
      ? this.createMigration(fn, props, props.migration, database, settings)
      : undefined;
    this.acknowledgeManagedPolicies();

    this.alarmTopic = props.alarmTopic ?? createAlarmTopic(this);
    this.alarms = createAlarms(this, props, namespace, this);
    this.customBusAlarms = this.custom
      ? createCustomBusAlarms(this, this.custom.arn, this.alarmTopic)
      : undefined;
    this.dashboard = createDashboard(this, props, namespace);
    this.createOutputs(props, database, settings);
  }

  /**
   * What an operator's `outbox` command needs to log in to this deployment's database
   * (docs/operations.md#connect-the-cli-to-the-deployed-database): the endpoint, the database,
   * the users and the `rds-db:connect` resource a person's IAM policy must allow; and every name
   * the runbooks' `aws` commands take: the functions, their log groups (named by CloudFormation,
   * not `/aws/lambda/<function>`), their schedules and the alarm topic. A synth test checks each
   * command of docs/operations.md against these outputs.
   */
  private createOutputs(
    props: OutboxRelayProps,
    database: OutboxDatabaseConnection,
    settings: FunctionSettings,
  ): void {
    const connect = 'docs/operations.md#connect-the-cli-to-the-deployed-database';
    const runbooks = 'docs/operations.md#runbooks';
    const outputs: Record<string, { value: string; description: string }> = {
      DatabaseHost: {
        value: database.host,
        description: `PGHOST for the outbox CLI (${database.shape === 'proxy' ? 'the RDS Proxy endpoint' : 'the instance or cluster endpoint'}), with OUTBOX_DB_IAM_AUTH=true: ${connect}`,
      },
      DatabasePort: { value: database.port, description: `PGPORT for the outbox CLI: ${connect}` },
      DatabaseName: {
        value: props.database.databaseName,
        description: `PGDATABASE for the outbox CLI: ${connect}`,
      },
      RelayDatabaseUser: { value: this.databaseUsers.relay, description: "The relay's database user" },
      MonitorDatabaseUser: {
        value: this.databaseUsers.monitor,
        description: `PGUSER for outbox status (reads the backlog, no payloads): ${connect}`,
      },
      StatusEnvironment: {
        value: [
          `${EnvVar.maxRelays}=${this.maxRelays}`,
          `${EnvVar.backlogPerRelay}=${props.backlogPerRelay ?? DEFAULT_BACKLOG_PER_RELAY}`,
          `${EnvVar.ordering}=${readSetting(EnvVar.ordering, settings.relay)}`,
          `${EnvVar.deadLetterPolicy}=${readSetting(EnvVar.deadLetterPolicy, settings.relay)}`,
        ].join(' '),
        description: 'The settings outbox status reads to say what the monitor would scale to, as deployed',
      },
      DatabaseConnectResource: {
        value: database.connectArn(this, '*'),
        description: `rds-db:connect resource of this database's users (replace * with the user): ${connect}`,
      },
      // The names the runbooks' aws commands take (docs/operations.md#runbooks): the functions' log
      // groups are named by CloudFormation, not /aws/lambda/<function>, so they are given here.
      ...Object.fromEntries(
        (
          [
            ['Relay', 'relay', this.relayFunction, this.relaySchedule],
            ['Monitor', 'monitor', this.monitorFunction, this.monitorSchedule],
          ] as const
        ).flatMap(([id, name, fn, schedule]) => [
          [
            `${id}FunctionName`,
            {
              value: fn.functionName,
              description: `The ${name} function (aws lambda … --function-name): ${runbooks}`,
            },
          ],
          [
            `${id}LogGroup`,
            {
              value: fn.logGroup.logGroupName,
              description: `The ${name} function's log group (aws logs tail): ${runbooks}`,
            },
          ],
          [
            `${id}ScheduleName`,
            {
              value: schedule.scheduleName,
              description: `The ${name}'s schedule, in the default group (aws scheduler get-schedule --name): ${runbooks}`,
            },
          ],
        ]),
      ),
      AlarmTopicArn: {
        value: this.alarmTopic.topicArn,
        description:
          'The SNS topic every alarm notifies: subscribe to it (aws sns subscribe --topic-arn), or no alarm reaches anyone',
      },
    };
    for (const [id, o] of Object.entries(outputs)) new CfnOutput(this, id, o);
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
        // One bus or the other: the relay refuses both variables set (shared/platform/config.ts).
        ...(this.custom
          ? { [EnvVar.eventBusArn]: this.custom.arn }
          : { [EnvVar.eventBusName]: this.eventBus.eventBusName }),
        [EnvVar.powertoolsServiceName]: ServiceName.relay,
        NODE_OPTIONS: '--enable-source-maps',
      },
      description: 'Outbox relay: claims leased outbox rows and publishes them with PutEvents',
    });
    if (this.custom) grantCustomBusPutEvents(relay, this.custom.arn, props.customEventBus?.kmsKey);
    else this.eventBus.grantPutEventsTo(relay);
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
        ...(this.heartbeatInterval
          ? {
              [EnvVar.heartbeat]: 'on',
              [EnvVar.heartbeatIntervalSeconds]: String(this.heartbeatInterval.toSeconds()),
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
    settings: FunctionSettings,
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
          ...inboxConsumersEnvironment(migration),
          // no published history: the relay role may delete the rows it publishes
          ...(keepsNoPublishedHistory(settings.monitor) ? { [EnvVar.publishedRetentionDays]: '0' } : {}),
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
}

/**
 * The sources the bus policy denies to all but the relay: {@link OutboxRelayProps.sources} and,
 * with the heartbeat on, its `outbox.heartbeat`, so that no one else can put a heartbeat that
 * keeps a consumer's heartbeat alarm quiet while the relay's events do not arrive. Undefined stays
 * undefined: on the construct's own bus every source is then denied, the heartbeat's with them.
 */
function policySources(sources: string[] | undefined, heartbeat: Duration | undefined) {
  if (sources === undefined || heartbeat === undefined || sources.includes(HEARTBEAT_EVENT.source)) {
    return sources;
  }
  return [...sources, HEARTBEAT_EVENT.source];
}

/**
 * The heartbeat's interval from {@link OutboxRelayProps.heartbeat}: 5 minutes by default.
 * @throws {OutboxConfigError} (`heartbeat.interval`) unless a whole number of minutes from 1 to 60
 */
function heartbeatIntervalOf(props: OutboxRelayProps): Duration | undefined {
  if (props.heartbeat === false) return undefined;
  const interval = props.heartbeat?.interval ?? Duration.minutes(5);
  const seconds = interval.toSeconds();
  if (!Number.isInteger(seconds / 60) || seconds < 60 || seconds > 3_600) {
    throw new OutboxConfigError(
      'heartbeat.interval',
      `expected a whole number of minutes from 1 to 60 (the monitor runs every minute; the consumers alarm after 3 intervals), got ${seconds} s`,
    );
  }
  return interval;
}
