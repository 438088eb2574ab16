/**
 * `OutboxRelay`: the relay Lambda, invoked by an EventBridge Scheduler schedule, publishing to an
 * event bus. This is the walking skeleton; the database (RDS Proxy, IAM auth) and the monitor are
 * wired in by later work.
 */
import { fileURLToPath } from 'node:url';
import { Duration } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as targets from 'aws-cdk-lib/aws-scheduler-targets';
import { Construct } from 'constructs';

const repoRoot = fileURLToPath(new URL('..', import.meta.url));

/** Props of {@link OutboxRelay}. */
export interface OutboxRelayProps {
  /**
   * The bus events are published to.
   * @default a new custom event bus
   */
  readonly eventBus?: events.IEventBus;
  /** Environment that tells the relay how to reach Postgres (`PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`). */
  readonly databaseEnvironment: Readonly<Record<string, string>>;
  /**
   * How often the scheduler invokes the relay; each invocation polls until near its timeout.
   * @default 1 minute (EventBridge Scheduler's finest rate)
   */
  readonly relaySchedule?: scheduler.ScheduleExpression;
  /**
   * Relay Lambda timeout.
   * @default 1 minute
   */
  readonly relayTimeout?: Duration;
  /**
   * Extra relay configuration (`OUTBOX_*` variables), validated by the relay at cold start.
   * @default none
   */
  readonly relayEnvironment?: Readonly<Record<string, string>>;
}

/** The relay Lambda, its schedule and its bus. */
export class OutboxRelay extends Construct {
  public readonly eventBus: events.IEventBus;
  public readonly relayFunction: nodejs.NodejsFunction;
  public readonly relaySchedule: scheduler.Schedule;

  constructor(scope: Construct, id: string, props: OutboxRelayProps) {
    super(scope, id);
    const timeout = props.relayTimeout ?? Duration.minutes(1);
    if (timeout.toSeconds() < 15 || timeout.toSeconds() > 900) {
      throw new Error(
        `OutboxRelay: relayTimeout must be between 15 seconds and 15 minutes (got ${timeout.toSeconds()} s)`,
      );
    }
    this.eventBus = props.eventBus ?? new events.EventBus(this, 'Bus');

    this.relayFunction = new nodejs.NodejsFunction(this, 'RelayFunction', {
      entry: `${repoRoot}functions/relay/handler.ts`,
      projectRoot: repoRoot,
      depsLockFilePath: `${repoRoot}package-lock.json`,
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: lambda.Architecture.ARM_64,
      memorySize: 256,
      timeout,
      environment: {
        ...props.databaseEnvironment,
        ...props.relayEnvironment,
        EVENT_BUS_NAME: this.eventBus.eventBusName,
        NODE_OPTIONS: '--enable-source-maps',
      },
      logGroup: new logs.LogGroup(this, 'RelayLogs', { retention: logs.RetentionDays.ONE_MONTH }),
      bundling: {
        format: nodejs.OutputFormat.ESM,
        minify: true,
        sourceMap: true,
        target: 'node24',
        // Bundle our pinned EventBridge client instead of the runtime's copy.
        bundleAwsSDK: true,
        forceDockerBundling: false,
        banner: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);",
      },
    });
    this.eventBus.grantPutEventsTo(this.relayFunction);

    this.relaySchedule = new scheduler.Schedule(this, 'RelaySchedule', {
      schedule: props.relaySchedule ?? scheduler.ScheduleExpression.rate(Duration.minutes(1)),
      target: new targets.LambdaInvoke(this.relayFunction, { retryAttempts: 0 }),
      description: 'Invokes the outbox relay; each invocation polls until close to its timeout',
    });
  }
}
