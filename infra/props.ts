/** The props of the `OutboxRelay` construct, and their defaults. */
import type { Duration } from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as events from 'aws-cdk-lib/aws-events';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as scheduler from 'aws-cdk-lib/aws-scheduler';
import type * as sns from 'aws-cdk-lib/aws-sns';
import type { MonitorTuning, RelayTuning } from '../shared/platform/config.ts';
import type { OutboxDatabaseProps, OutboxMigrationProps } from './database.ts';

/**
 * The relay's default memory, MB: the smallest size whose share of a vCPU lets one invocation reach
 * the PutEvents bound at the default settings (4 calls in flight × 10 entries / 20 ms = 2,000
 * events/s); above it more memory buys nothing unless OUTBOX_PUBLISH_CONCURRENCY is raised
 * (docs/performance.md#lambda-sizing-at-20-ms-bus-latency, docs/investigations/relay-cpu.md#the-relays-default-memory).
 */
export const DEFAULT_RELAY_MEMORY_MB = 512;

/**
 * How much longer than its schedule's period the relay's timeout is by default, s. An invocation
 * polls until 8 s before its timeout, so with `rate(1 minute)` and 90 s each one still polls 22 s
 * after its successor was due, which may be that late (Scheduler's delay, a cold start); the price
 * is two relays polling at once for up to 22 s a minute
 * (docs/investigations/relay-cpu.md#the-relays-timeout-overlap).
 */
export const RELAY_TIMEOUT_OVERLAP_SECONDS = 30;
/** Below this much overlap, s, the construct warns: a late or cold successor leaves a gap. */
export const MIN_OVERLAP_SECONDS = 15;
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
export const SCALE_OUT_SLACK_SECONDS = 10;

/**
 * Default of {@link OutboxCustomEventBusProps.retentionDays}, days: the Custom Event Bus keeps each
 * event this long for a replay (a subscriber with `StartingPosition: POINT_IN_TIME`). A week covers
 * a consumer broken over a long weekend and found on the next working day; the outbox itself keeps
 * published rows for its own retention, so a longer replay can come from there.
 */
export const DEFAULT_CUSTOM_BUS_RETENTION_DAYS = 7;

/**
 * The Custom Event Bus (EventsV2, `AWS::EventsV2::EventBus`) the relay publishes to instead of a
 * classic bus: FIFO per aggregate (`EventGroupId`) and deduplicated by event id
 * (docs/configuration.md#custom-event-bus-eventsv2). Either the construct creates one (the
 * default, with {@link retentionDays}, {@link kmsKey} and {@link name}), or it takes
 * {@link existingArn}; not both.
 */
export interface OutboxCustomEventBusProps {
  /**
   * An existing Custom Event Bus's ARN, `arn:<partition>:events:<region>:<account>:event-busv2/<name>/<id>`.
   * Its resource policy is not the construct's to write (it is one document): with `sources` set,
   * `restrictPutEvents: false` is required (synthesis fails otherwise).
   * @default none: the construct creates a bus
   */
  readonly existingArn?: string;
  /**
   * How long the bus keeps events for a replay, whole days, 1–365 (the bus's
   * `StorageConfiguration.RetentionPeriodInDays`). Only for a bus the construct creates.
   * @default 7 ({@link DEFAULT_CUSTOM_BUS_RETENTION_DAYS})
   */
  readonly retentionDays?: number;
  /**
   * A customer managed key the bus encrypts events with. The construct lets
   * `events.amazonaws.com` use it (`kms:Decrypt`, `kms:Encrypt`, `kms:GenerateDataKey`,
   * `kms:GenerateDataKeyWithoutPlaintext`, `kms:ReEncryptFrom`, `kms:ReEncryptTo`,
   * `kms:DescribeKey`; without the first five minus GenerateDataKey the bus goes CREATE_FAILED)
   * when the key is in this stack (else add that to its key policy yourself), and grants the
   * relay's role `kms:Decrypt` on it (PutEvents checks it with the caller's credentials). Only
   * for a bus the construct creates.
   * @default an AWS owned key (EventBridge's default; no key policy to manage, no KMS charges)
   */
  readonly kmsKey?: kms.IKey;
  /**
   * The bus's name: a letter or digit, then letters, digits, `.`, `-` or `_`, at most 256
   * characters. Only for a bus the construct creates.
   * @default this construct's unique name in the stack
   */
  readonly name?: string;
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
   * Publish to a Custom Event Bus (EventsV2) instead of a classic one: the relay gets
   * `OUTBOX_EVENT_BUS_ARN` (and no `EVENT_BUS_NAME`) and `events:PutEvents` on that bus's ARN only;
   * with {@link sources} or on a bus it creates, the construct writes the bus's resource policy
   * (`AWS::EventsV2::ResourcePolicy`) with the same Deny statement as on a classic bus; alarms
   * watch the bus's subscribers in `AWS/EventsV2`. Consumers subscribe with `OutboxConsumer`'s
   * `customEventBusArn` ({@link OutboxRelay.customEventBusArn}). Not with {@link eventBus}.
   * (docs/relay-construct.md#the-custom-event-bus-eventsv2)
   * @throws {OutboxConfigError} (`customEventBus.*`, `eventBus`, `restrictPutEvents`) on a bad or conflicting setting
   * @default none: a classic bus ({@link eventBus})
   */
  readonly customEventBus?: OutboxCustomEventBusProps;
  /**
   * The `Source` values the outbox's events carry (each event's `source`, or the producers'
   * default). EventBridge does not authenticate `Source`: anyone allowed `events:PutEvents` on the
   * bus could put a well-formed envelope under these sources with a far-ahead `sequence`, which
   * stops an `ignore-stale` consumer's chain (every real event after it is stale) or moves a
   * `wait-for-gap` one past a gap that is not there. With them, the construct adds a statement to
   * the bus's resource policy that denies `events:PutEvents` of these sources to every principal
   * but the relay's role (and {@link publishers}); other sources stay as the bus's other policies
   * say. Each is 1–256 characters, not starting with `aws.` (as `enqueue` requires), named once.
   * With {@link heartbeat} on, the statement denies its source `outbox.heartbeat` too.
   * (docs/relay-construct.md#who-may-put-the-outboxs-sources-on-the-bus)
   * @default none: on the bus the construct creates, the statement denies PutEvents of any source
   *   to every principal but the relay (the bus is the outbox's alone); on a bus you pass, no
   *   statement is added and synthesis warns
   */
  readonly sources?: string[];
  /**
   * Whether the construct adds the statement of {@link sources} to the bus's resource policy.
   * `false` for a bus whose policy is not this stack's to change (another account's, or one a
   * stack of its own sets whole with the bus's `Policy` property, which would overwrite it).
   * @default true
   */
  readonly restrictPutEvents?: boolean;
  /**
   * Roles besides the relay's that may put events under {@link sources}: an operator's role that
   * runs `outbox relay` by hand, a replay tool. Their own policies must still allow PutEvents.
   * @default none
   */
  readonly publishers?: iam.IRole[];
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
   * `maxRelays - 1`; none while the bus throttles), 100 ms apart, so every value up to 100 is reached
   * in one run; each extra relay returns once
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
   * {@link relaySettings}. `publishedRetentionDays: 0` keeps no published history: the construct
   * then sets it on the relay too (which deletes each row it publishes) and on the migrate function
   * (which grants the relay role DELETE on the outbox); see docs/configuration.md#no-published-history.
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
   * The heartbeat (docs/observe.md#the-heartbeat): the monitor enqueues an `OutboxHeartbeat` event
   * (source `outbox.heartbeat`, no payload) through the outbox once per `interval` (a whole number
   * of minutes from 1 to 60; the monitor runs every minute), and every `OutboxConsumer` of the
   * app on its bus receives it and alarms when none arrived for a while. About 8,640 events a month
   * per consumer at 5 minutes. `false`: no heartbeat (the consumers then set no heartbeat alarm).
   * Needs migration 030 (applied by the construct's migrate trigger).
   * @default { interval: Duration.minutes(5) }
   */
  readonly heartbeat?: false | { readonly interval?: Duration };
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
   * Address of the operations runbooks (this project's docs/operations.md) that each alarm's
   * description links to, with the alarm's section as `#anchor`: give your own copy's (a wiki, a
   * fork, a pinned release) so that the links open the runbook of the version you deploy.
   * @default {@link OPERATIONS_DOCS_URL}
   */
  readonly runbookUrl?: string;
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

/**
 * docs/operations.md on GitHub, its main branch: where each alarm's description links to, by
 * default ({@link OutboxRelayProps.runbookUrl}).
 */
export const OPERATIONS_DOCS_URL =
  'https://github.com/outbox-relay-aws/outbox-relay-aws/blob/main/docs/operations.md';
