/**
 * The construct's synth-time checks and derived sizes: the relay's timeout against its schedule,
 * how far the relays scale out within the connection budget, the functions' settings validated with
 * their own schemas, and the props' ranges. Each refusal names the prop.
 */
import { Annotations, Duration } from 'aws-cdk-lib';
import type * as scheduler from 'aws-cdk-lib/aws-scheduler';
import type { Construct } from 'constructs';
import {
  checkEnvironment,
  MONITOR_TUNING_VARS,
  poolSize,
  RELAY_TUNING_VARS,
  readSetting,
  tuningToEnv,
} from '../shared/platform/config.ts';
import {
  EnvVar,
  MONITOR_POOL_SIZE,
  RELAY_STOPS_POLLING_BEFORE_TIMEOUT_MS,
  relayPoolSize,
} from '../shared/platform/names.ts';
import {
  DEFAULT_DATABASE_CONNECTION_BUDGET,
  DEFAULT_MAX_RELAYS,
  DEFAULT_RELAY_MEMORY_MB,
  ECONOMY_IDLE_RETURN_SECONDS,
  MIN_OVERLAP_SECONDS,
  type OutboxRelayProps,
  RELAY_TIMEOUT_OVERLAP_SECONDS,
  SCALE_OUT_SLACK_SECONDS,
} from './props.ts';

/** Seconds between invocations of a `rate(...)` schedule expression; undefined for cron and at. */
export function schedulePeriodSeconds(expression: string): number | undefined {
  const m = /^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$/.exec(expression);
  if (!m) return undefined;
  const unit = { minute: 60, minutes: 60, hour: 3_600, hours: 3_600, day: 86_400, days: 86_400 };
  return Number(m[1]) * unit[m[2] as keyof typeof unit];
}

/** The relay's and the monitor's tunable variables, validated with the functions' own schemas. */
export interface FunctionSettings {
  relay: Record<string, string>;
  monitor: Record<string, string>;
}

/**
 * The relay's and the monitor's settings from the props, as environment variables: the deprecated
 * string maps, then `relayMode`, then the typed settings (which win). Each is validated here, at
 * synth, with the schema the function applies at cold start.
 * @throws {OutboxConfigError} naming the prop and the setting, e.g. `relaySettings.batchSize (OUTBOX_BATCH_SIZE)`
 */
export function functionSettings(props: OutboxRelayProps): FunctionSettings {
  const monitor = {
    ...checkEnvironment(MONITOR_TUNING_VARS, props.monitorEnvironment, 'monitorEnvironment'),
    ...tuningToEnv(MONITOR_TUNING_VARS, props.monitorSettings, 'monitorSettings'),
  };
  return {
    relay: {
      ...checkEnvironment(RELAY_TUNING_VARS, props.relayEnvironment, 'relayEnvironment'),
      ...(props.relayMode === 'economy'
        ? { [EnvVar.idleReturnSeconds]: String(ECONOMY_IDLE_RETURN_SECONDS) }
        : {}),
      ...tuningToEnv(RELAY_TUNING_VARS, props.relaySettings, 'relaySettings'),
      // No published history is one setting for all: the relay deletes what it publishes.
      ...(keepsNoPublishedHistory(monitor) ? { [EnvVar.publishedRetentionDays]: '0' } : {}),
    },
    monitor,
  };
}

/**
 * Whether the monitor's settings keep no published history (`publishedRetentionDays: 0`): then the
 * relay deletes each row it publishes, and the migrate function gives its role DELETE on the outbox.
 */
export function keepsNoPublishedHistory(monitor: Readonly<Record<string, string>>): boolean {
  const days = monitor[EnvVar.publishedRetentionDays];
  return days !== undefined && Number(days) === 0;
}

/**
 * How long an extra relay polls: the monitor's period less some slack, so that one minute's
 * extras have returned before the next minute's are started.
 */
export function scaleOutSecondsFor(
  monitorSchedule: scheduler.ScheduleExpression,
  relayTimeout: Duration,
): number {
  const monitorPeriod = schedulePeriodSeconds(monitorSchedule.expressionString) ?? 60;
  return Math.max(10, Math.min(monitorPeriod - SCALE_OUT_SLACK_SECONDS, relayTimeout.toSeconds() - 10));
}

/**
 * The relay's timeout: as given, or the schedule's period plus {@link RELAY_TIMEOUT_OVERLAP_SECONDS}.
 * @throws when the timeout leaves a gap in every period (nothing polls between an invocation's
 *   last poll and its successor's first)
 */
export function relayTimeoutFor(
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
export function scaleOutBounds(
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
 * Checks the props the other checks do not, at synth.
 * @throws naming the prop and its allowed range
 */
export function validate(props: OutboxRelayProps): void {
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
