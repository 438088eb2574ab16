/**
 * The configuration contract (see docs/configuration.md#environment-variables): every setting's schema, default and
 * unit, keyed by its {@link EnvVar} name, in this one module. The relay, the monitor, the migrate
 * function, the CLI and the database pool read their variables through it at start, and the CDK
 * construct validates the settings it is given with the same schemas at synth. zod does the
 * parsing so that a bad value fails with a message naming the variable instead of surfacing later
 * as NaN or undefined.
 *
 * `zod/mini`, the one zod build of the project: its functions tree-shake to what is used, where
 * the full build puts all of zod into every bundle (docs/investigations/relay-cpu.md#the-lambda-bundles).
 */
import * as z from 'zod/mini';
import type { output } from 'zod/v4/core';
import { databaseSettingSchemas } from './database-settings.ts';
import { int, num, parseEnv, required } from './env-settings.ts';
import { OutboxConfigError } from './errors.ts';

// The database's settings and the parser live in modules of their own, which the consumer's
// bundle reaches without this one (every role's schemas, about 5 KB minified).
export { databaseConfigSchema } from './database-settings.ts';
export { parseEnv } from './env-settings.ts';

import { DEFAULT_METRIC_NAMESPACE, DEFAULT_ROLES, EnvVar } from './names.ts';

/**
 * Every setting's schema, keyed by its variable. Units are in the names (ms, seconds, days, bytes)
 * or in the schema's description.
 */
export const settingSchemas = {
  // --- the database (every role): database-settings.ts ---
  ...databaseSettingSchemas,

  // --- both Lambdas ---
  /** CloudWatch namespace of the relay's and the monitor's metrics. */
  [EnvVar.metricNamespace]: z._default(
    z.string().check(z.minLength(1), z.maxLength(255)),
    DEFAULT_METRIC_NAMESPACE,
  ),

  // --- the relay ---
  [EnvVar.eventBusName]: z
    .string()
    .check(
      z.minLength(1, 'is required: the name or ARN of the EventBridge event bus'),
      z.maxLength(1_600),
      z.regex(
        /^(arn:aws[\w-]*:events:[\w-]+:\d{12}:event-bus\/)?[/.\-_A-Za-z0-9]{1,256}$/,
        'must be an event bus name ([/.-_A-Za-z0-9], at most 256) or its ARN',
      ),
    ),
  /**
   * A Custom Event Bus (EventsV2): its ARN, `arn:<partition>:events:<region>:<account>:event-busv2/<name>/<id>`
   * (the ARN format of the EventsV2 API's `EventBusArn`). Optional: unset, the relay publishes to
   * `EVENT_BUS_NAME`'s classic bus.
   */
  [EnvVar.eventBusArn]: z.optional(
    z
      .string()
      .check(
        z.maxLength(1_600),
        z.regex(
          /^arn:aws[\w-]*:events:[a-z0-9-]+:\d{12}:event-busv2\/[^/\s]+(\/[^/\s]+)?$/,
          'must be a Custom Event Bus ARN, arn:aws:events:<region>:<account>:event-busv2/<name>/<id>',
        ),
      ),
  ),
  /** Aggregates (heads) claimed per pass. */
  [EnvVar.batchSize]: z._default(int(1, 10_000, 'aggregates claimed per pass'), 100),
  /**
   * Lease length in seconds: how long a claimed row stays with one relay before others may take
   * it. Short, because a live pass renews it while it works: the rows of a relay that died come
   * back this long after its last renewal.
   */
  [EnvVar.leaseSeconds]: z._default(int(5, 3_600), 8),
  /** Claims per row before it is dead-lettered. */
  [EnvVar.maxAttempts]: z._default(int(1, 1_000, 'claims per event'), 10),
  /** First retry delay in ms; doubles per attempt, with full jitter. */
  [EnvVar.backoffBaseMs]: z._default(int(0, 3_600_000), 1_000),
  /** Cap on a retry delay, ms. */
  [EnvVar.backoffMaxMs]: z._default(int(0, 86_400_000), 300_000),
  /** PutEvents calls in flight at once. */
  [EnvVar.publishConcurrency]: z._default(int(1, 64, 'PutEvents requests in flight'), 4),
  /** Passes run at once, so claims and marks overlap publishing. */
  [EnvVar.pipelineDepth]: z._default(int(1, 8, 'passes at once'), 2),
  /** Bytes per PutEvents request, as EventBridge counts them (1 MiB today; 262144 on older limits). */
  [EnvVar.maxRequestBytes]: z._default(int(1_024, 1_048_576), 1_048_576),
  /** Events of one aggregate claimed together and sent one after another in a pass. */
  [EnvVar.perAggregateLimit]: z._default(int(1, 1_000, 'events per aggregate per pass'), 10),
  /** `aggregate`: per-aggregate publication order. `none`: no ordering, plain batch claims. */
  [EnvVar.ordering]: z._default(z.enum(['aggregate', 'none']), 'aggregate'),
  /** `continue`: later events of a dead-lettered aggregate go on. `block`: they wait for an operator. */
  [EnvVar.deadLetterPolicy]: z._default(z.enum(['continue', 'block']), 'continue'),
  /** Wait between polls when the outbox is empty, ms. */
  [EnvVar.pollIntervalMs]: z._default(int(10, 60_000), 200),
  /**
   * Economy mode: a scheduled relay invocation returns after this many seconds in which it claimed
   * nothing, instead of polling until its deadline; the schedule brings the next one. 0: never
   * (steady mode, the default).
   */
  [EnvVar.idleReturnSeconds]: z._default(int(0, 900), 0),

  // --- the monitor and `outbox prune` ---
  /**
   * Published rows are kept this long, days. 0: no published history: the relay deletes each row in
   * the statement that would have marked it published (docs/configuration.md#no-published-history),
   * and the relay's role needs DELETE on the outbox (`ensureRoles`' `relayDeletesPublished`). Read by
   * the relay, the monitor and the CLI alike.
   */
  [EnvVar.publishedRetentionDays]: z._default(
    z.coerce.number().check(z.minimum(0), z.maximum(3_650), z.describe('days; 0 keeps no published history')),
    7,
  ),
  /** Dead-lettered rows are kept this long, days (longer: they wait for an operator). */
  [EnvVar.deadLetterRetentionDays]: z._default(num(0.001, 3_650), 30),
  /** Inbox records are kept this long, days (well above EventBridge's 24-hour retry window). */
  [EnvVar.inboxRetentionDays]: z._default(num(2, 3_650), 30),
  /**
   * Idempotency keys are remembered this long after their event was enqueued, days, and at least as
   * long as the event is in the outbox (longer than the published rows' 7 by default).
   */
  [EnvVar.idempotencyRetentionDays]: z._default(num(0.001, 3_650), 30),
  /** Rows per DELETE statement. */
  [EnvVar.pruneBatchSize]: z._default(int(1, 100_000, 'rows per DELETE'), 1_000),
  /** Longest a pruning run may take, ms (also capped by the Lambda's remaining time). */
  [EnvVar.pruneTimeBudgetMs]: z._default(int(100, 900_000), 20_000),
  /** Name or ARN of the relay function the monitor invokes to scale out; unset: no scale-out. */
  [EnvVar.relayFunctionName]: z.optional(
    z
      .string()
      .check(
        z.regex(
          /^(arn:aws[\w-]*:lambda:[\w-]+:\d{12}:function:)?[A-Za-z0-9_-]{1,64}(:[\w$-]{1,128})?$/,
          'must be a Lambda function name or ARN',
        ),
      ),
  ),
  /** Most relays at once, the scheduled one included; 1 turns scale-out off. */
  [EnvVar.maxRelays]: z._default(int(1, 100, 'relays'), 1),
  /** Pending events per relay the monitor wants running. */
  [EnvVar.backlogPerRelay]: z._default(int(1, 100_000_000, 'pending events per relay'), 30_000),
  /** Longest an extra relay polls, counted from the start of the monitor's invocation, seconds. */
  [EnvVar.scaleOutSeconds]: z._default(int(10, 900), 50),
  /** The heartbeat (docs/observe.md#the-heartbeat): off unless set; the OutboxRelay construct sets it on. */
  [EnvVar.heartbeat]: z._default(z.enum(['on', 'off']), 'off'),
  /** A heartbeat at most once per this many seconds (the monitor runs every minute). */
  [EnvVar.heartbeatIntervalSeconds]: z._default(int(60, 86_400), 300),

  // --- the deploy-time migrate function ---
  [EnvVar.adminSecretArn]: required(),
  [EnvVar.adminHost]: required(),
  [EnvVar.adminDatabase]: required(),
  [EnvVar.relayRole]: z._default(z.string(), DEFAULT_ROLES.relay),
  [EnvVar.monitorRole]: z._default(z.string(), DEFAULT_ROLES.monitor),
  [EnvVar.producerRole]: z._default(z.string(), DEFAULT_ROLES.producer),
  [EnvVar.consumerRole]: z._default(z.string(), DEFAULT_ROLES.consumer),
  /** Inbox consumers that get a role of their own, comma-separated (`billing,shipping`). */
  [EnvVar.inboxConsumers]: z._default(
    z.pipe(
      z.string(),
      z.transform((names) =>
        names
          .split(',')
          .map((name) => name.trim())
          .filter((name) => name !== ''),
      ),
    ),
    [],
  ),

  // --- the CLI ---
  /** `outbox enqueue`: Source for lines without one. */
  [EnvVar.defaultSource]: z.optional(z.string()),
} as const;

/** A variable that has a schema in {@link settingSchemas}. */
export type SettingVar = keyof typeof settingSchemas;
/** The parsed value of a setting. */
export type SettingValue<V extends SettingVar> = output<(typeof settingSchemas)[V]>;

/** The schemas of `variables`, as one zod object. */
function schemaOf<const V extends SettingVar>(variables: readonly V[]) {
  return z.object(
    Object.fromEntries(variables.map((v) => [v, settingSchemas[v]])) as {
      [K in V]: (typeof settingSchemas)[K];
    },
  );
}

/** The relay's settings (fields of {@link RelaySettings}) and the variable each is read from. */
export const RELAY_SETTING_VARS = {
  eventBusName: EnvVar.eventBusName,
  batchSize: EnvVar.batchSize,
  leaseSeconds: EnvVar.leaseSeconds,
  maxAttempts: EnvVar.maxAttempts,
  backoffBaseMs: EnvVar.backoffBaseMs,
  backoffMaxMs: EnvVar.backoffMaxMs,
  publishConcurrency: EnvVar.publishConcurrency,
  pipelineDepth: EnvVar.pipelineDepth,
  maxRequestBytes: EnvVar.maxRequestBytes,
  perAggregateLimit: EnvVar.perAggregateLimit,
  ordering: EnvVar.ordering,
  deadLetterPolicy: EnvVar.deadLetterPolicy,
  pollIntervalMs: EnvVar.pollIntervalMs,
  idleReturnSeconds: EnvVar.idleReturnSeconds,
  metricNamespace: EnvVar.metricNamespace,
  publishedRetentionDays: EnvVar.publishedRetentionDays,
} as const satisfies Record<Exclude<keyof RelaySettings, 'eventBusArn'>, SettingVar>;

/** Relay settings; the units are in the names (ms, seconds, bytes). */
export const relayConfigSchema = schemaOf(Object.values(RELAY_SETTING_VARS));

/** The relay's settings in the shape the relay core takes (see {@link settingSchemas} for each). */
export interface RelaySettings {
  /** The classic bus's name or ARN; with `eventBusArn`, that ARN (for logs and reports). */
  eventBusName: string;
  /**
   * Set (`OUTBOX_EVENT_BUS_ARN`): the relay publishes to this Custom Event Bus (EventsV2) instead,
   * with per-aggregate `EventGroupId` and the event id as `DeduplicationId`.
   */
  eventBusArn?: string;
  batchSize: number;
  leaseSeconds: number;
  maxAttempts: number;
  backoffBaseMs: number;
  backoffMaxMs: number;
  publishConcurrency: number;
  pipelineDepth: number;
  maxRequestBytes: number;
  perAggregateLimit: number;
  ordering: 'aggregate' | 'none';
  deadLetterPolicy: 'continue' | 'block';
  pollIntervalMs: number;
  /** Economy mode: a relay Lambda invocation returns after this many seconds without a claim; 0: never. */
  idleReturnSeconds: number;
  metricNamespace: string;
  /**
   * `OUTBOX_PUBLISHED_RETENTION_DAYS`, days. The relay reads only whether it is 0: then it keeps no
   * published history and deletes each row as it is published (see {@link keepsPublishedHistory}).
   * Unset (settings built by hand): 7, published rows kept.
   */
  publishedRetentionDays?: number;
}

/**
 * Whether published rows stay in the outbox (to be pruned after their retention) or leave it in the
 * statement that would have marked them: false only for `OUTBOX_PUBLISHED_RETENTION_DAYS=0`.
 */
export function keepsPublishedHistory(settings: Pick<RelaySettings, 'publishedRetentionDays'>): boolean {
  return settings.publishedRetentionDays !== 0;
}

/**
 * Reads and validates the relay's environment.
 * @param env defaults to `process.env`
 * @throws {OutboxConfigError} naming the first variable that is missing or malformed
 */
export function loadRelaySettings(env: NodeJS.ProcessEnv = process.env): RelaySettings {
  const eventBusArn = readSetting(EnvVar.eventBusArn, env);
  const busName = env[EnvVar.eventBusName]?.trim();
  if (eventBusArn === undefined) {
    if (busName?.includes(':event-busv2/')) {
      throw new OutboxConfigError(
        EnvVar.eventBusName,
        `names a Custom Event Bus (EventsV2): set ${EnvVar.eventBusArn} to its ARN instead`,
      );
    }
    const e = parseEnv(relayConfigSchema, env);
    return Object.fromEntries(
      Object.entries(RELAY_SETTING_VARS).map(([field, variable]) => [field, e[variable]]),
    ) as unknown as RelaySettings;
  }
  // One bus: a Custom Event Bus ARN beside a classic bus name is a configuration mistake, not a choice.
  if (busName) {
    throw new OutboxConfigError(
      EnvVar.eventBusArn,
      `is set beside ${EnvVar.eventBusName}, and the relay publishes to one bus: set only ${EnvVar.eventBusArn} for the Custom ` +
        `Event Bus, or only ${EnvVar.eventBusName} for a classic event bus`,
    );
  }
  const { eventBusName: _name, ...rest } = RELAY_SETTING_VARS;
  const e = parseEnv(schemaOf(Object.values(rest)), env) as Record<string, unknown>;
  return {
    ...(Object.fromEntries(Object.entries(rest).map(([field, variable]) => [field, e[variable]])) as Omit<
      RelaySettings,
      'eventBusName'
    >),
    eventBusName: eventBusArn,
    eventBusArn,
  };
}

/**
 * Reads one setting, validated by its schema (its default when unset).
 * @throws {OutboxConfigError} naming `variable` when its value is malformed
 */
export function readSetting<V extends SettingVar>(
  variable: V,
  env: NodeJS.ProcessEnv = process.env,
): SettingValue<V> {
  return (parseEnv(schemaOf([variable]), env) as Record<string, unknown>)[variable] as SettingValue<V>;
}

/** The deploy-time migrate function's settings (functions/migrate). */
export const migrateConfigSchema = schemaOf([
  EnvVar.adminSecretArn,
  EnvVar.adminHost,
  EnvVar.adminDatabase,
  EnvVar.relayRole,
  EnvVar.monitorRole,
  EnvVar.producerRole,
  EnvVar.consumerRole,
  EnvVar.inboxConsumers,
  // 0: no published history, and the relay role gets DELETE on the outbox (ensureRoles)
  EnvVar.publishedRetentionDays,
]);

/**
 * Settings a deployment may tune per function (the CDK construct's `relaySettings` and
 * `monitorSettings`), each with the variable it sets. The construct sets the rest itself (the bus,
 * the database, the namespace, scale-out).
 */
export const RELAY_TUNING_VARS = {
  // Every relay setting but those the construct sets itself (the published history is
  // monitorSettings.publishedRetentionDays, copied to the relay), and the pool's.
  ...omit(RELAY_SETTING_VARS, ['eventBusName', 'metricNamespace', 'publishedRetentionDays']),
  dbPoolSize: EnvVar.dbPoolSize,
  dbConnectTimeoutSeconds: EnvVar.dbConnectTimeoutSeconds,
  dbStatementTimeoutMs: EnvVar.dbStatementTimeoutMs,
} as const;

/** `record` without the `keys`. */
function omit<T extends object, K extends keyof T>(record: T, keys: readonly K[]): Omit<T, K> {
  return Object.fromEntries(Object.entries(record).filter(([k]) => !keys.includes(k as K))) as Omit<T, K>;
}

/** See {@link RELAY_TUNING_VARS}. */
export const MONITOR_TUNING_VARS = {
  publishedRetentionDays: EnvVar.publishedRetentionDays,
  deadLetterRetentionDays: EnvVar.deadLetterRetentionDays,
  inboxRetentionDays: EnvVar.inboxRetentionDays,
  idempotencyRetentionDays: EnvVar.idempotencyRetentionDays,
  pruneBatchSize: EnvVar.pruneBatchSize,
  pruneTimeBudgetMs: EnvVar.pruneTimeBudgetMs,
  dbPoolSize: EnvVar.dbPoolSize,
  dbConnectTimeoutSeconds: EnvVar.dbConnectTimeoutSeconds,
  dbStatementTimeoutMs: EnvVar.dbStatementTimeoutMs,
} as const;

/** Typed settings for a table of tunable variables: each field optional, in its parsed type. */
export type TuningOf<T extends Record<string, SettingVar>> = { readonly [F in keyof T]?: SettingValue<T[F]> };
/** The relay settings a deployment may set (construct prop `relaySettings`); units in the names. */
export type RelayTuning = TuningOf<typeof RELAY_TUNING_VARS>;
/** The monitor settings a deployment may set (construct prop `monitorSettings`); units in the names. */
export type MonitorTuning = TuningOf<typeof MONITOR_TUNING_VARS>;

/**
 * Turns typed settings into the function's environment, each value validated by its variable's
 * schema (so a bad value fails where it is given, e.g. at `cdk synth`, not at the first cold start).
 * @param table which fields may be set and their variables ({@link RELAY_TUNING_VARS}, {@link MONITOR_TUNING_VARS})
 * @param where names the settings in errors, e.g. `relaySettings`
 * @returns variable → value, for the fields set
 * @throws {OutboxConfigError} naming `where.field (VARIABLE)`: an unknown field, or a value its schema refuses
 */
export function tuningToEnv<T extends Record<string, SettingVar>>(
  table: T,
  tuning: TuningOf<T> | undefined,
  where: string,
): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [field, value] of Object.entries(tuning ?? {})) {
    if (value === undefined) continue;
    const variable = table[field];
    if (!variable) {
      throw new OutboxConfigError(
        `${where}.${field}`,
        `is not a setting here; one of ${Object.keys(table).join(', ')}`,
      );
    }
    checkValue(variable, String(value), `${where}.${field} (${variable})`);
    env[variable] = String(value);
  }
  return env;
}

/**
 * Validates an environment map of a function's tunable variables (the construct's deprecated
 * `relayEnvironment` / `monitorEnvironment`): every key must be one of `table`'s variables and
 * every value must pass its schema.
 * @returns a copy of `env`
 * @throws {OutboxConfigError} naming `where.VARIABLE`
 */
export function checkEnvironment<T extends Record<string, SettingVar>>(
  table: T,
  env: Readonly<Record<string, string>> | undefined,
  where: string,
): Record<string, string> {
  const allowed = new Set<string>(Object.values(table));
  for (const [variable, value] of Object.entries(env ?? {})) {
    if (!allowed.has(variable)) {
      throw new OutboxConfigError(
        `${where}.${variable}`,
        `is not a setting of this function; one of ${[...allowed].join(', ')}`,
      );
    }
    checkValue(variable as SettingVar, value, `${where}.${variable}`);
  }
  return { ...env };
}

/** Parses one value with its variable's schema; a refusal is reported under `name`. */
function checkValue(variable: SettingVar, value: string, name: string): void {
  try {
    readSetting(variable, { [variable]: value });
  } catch (error) {
    if (!(error instanceof OutboxConfigError)) throw error;
    throw new OutboxConfigError(name, error.message.slice(`${variable}: `.length));
  }
}

/** Monitor settings (pruning and metrics); units in the names. */
export const monitorConfigSchema = schemaOf([
  EnvVar.publishedRetentionDays,
  EnvVar.deadLetterRetentionDays,
  EnvVar.inboxRetentionDays,
  EnvVar.idempotencyRetentionDays,
  EnvVar.pruneBatchSize,
  EnvVar.pruneTimeBudgetMs,
  EnvVar.metricNamespace,
  EnvVar.relayFunctionName,
  EnvVar.maxRelays,
  EnvVar.backlogPerRelay,
  EnvVar.scaleOutSeconds,
  EnvVar.heartbeat,
  EnvVar.heartbeatIntervalSeconds,
  // The relay's, for scale-out: whether dead letters hold rows back (the construct copies them).
  EnvVar.ordering,
  EnvVar.deadLetterPolicy,
]);

/** The monitor's settings in the shape the code takes. */
export interface MonitorSettings {
  publishedRetentionSeconds: number;
  deadLetterRetentionSeconds: number;
  inboxRetentionSeconds: number;
  idempotencyKeyRetentionSeconds: number;
  pruneBatchSize: number;
  pruneTimeBudgetMs: number;
  metricNamespace: string;
  /**
   * Seconds between heartbeats (`OUTBOX_HEARTBEAT=on`): each run enqueues one unless one was
   * enqueued in the current interval; undefined: no heartbeat.
   */
  heartbeatIntervalSeconds?: number;
  /** Set when the monitor scales the relays out (a relay function is named and `maxRelays` > 1). */
  scaleOut?: {
    /** Name or ARN of the relay function. */
    relayFunctionName: string;
    /** Most relays at once, the scheduled one included (1: never scale out). */
    maxRelays: number;
    /** Claimable events per relay: `ceil(claimable / backlogPerRelay)` relays are wanted. */
    backlogPerRelay: number;
    /** Longest an extra relay polls, counted from the start of the monitor's invocation, seconds. */
    forSeconds: number;
    /** The relay's `OUTBOX_ORDERING`: with `aggregate` and `block`, a dead letter holds rows back. */
    ordering: 'aggregate' | 'none';
    /** The relay's `OUTBOX_DEAD_LETTER_POLICY`. */
    deadLetterPolicy: 'continue' | 'block';
  };
}

/**
 * Reads and validates the monitor's environment.
 * @throws {OutboxConfigError} naming the first variable that is malformed
 */
export function loadMonitorSettings(env: NodeJS.ProcessEnv = process.env): MonitorSettings {
  const e = parseEnv(monitorConfigSchema, env);
  const relayFunctionName = e[EnvVar.relayFunctionName];
  return {
    publishedRetentionSeconds: Math.round(e[EnvVar.publishedRetentionDays] * 86_400),
    deadLetterRetentionSeconds: Math.round(e[EnvVar.deadLetterRetentionDays] * 86_400),
    inboxRetentionSeconds: Math.round(e[EnvVar.inboxRetentionDays] * 86_400),
    idempotencyKeyRetentionSeconds: Math.round(e[EnvVar.idempotencyRetentionDays] * 86_400),
    pruneBatchSize: e[EnvVar.pruneBatchSize],
    pruneTimeBudgetMs: e[EnvVar.pruneTimeBudgetMs],
    metricNamespace: e[EnvVar.metricNamespace],
    ...(e[EnvVar.heartbeat] === 'on' ? { heartbeatIntervalSeconds: e[EnvVar.heartbeatIntervalSeconds] } : {}),
    ...(relayFunctionName && e[EnvVar.maxRelays] > 1
      ? {
          scaleOut: {
            relayFunctionName,
            maxRelays: e[EnvVar.maxRelays],
            backlogPerRelay: e[EnvVar.backlogPerRelay],
            forSeconds: e[EnvVar.scaleOutSeconds],
            ordering: e[EnvVar.ordering],
            deadLetterPolicy: e[EnvVar.deadLetterPolicy],
          },
        }
      : {}),
  };
}

/**
 * The pool size of a role: `OUTBOX_DB_POOL_SIZE` when it is set, else `roleDefault` (the relay
 * Lambda's {@link relayPoolSize}, the monitor's {@link MONITOR_POOL_SIZE}).
 * @throws {OutboxConfigError} naming OUTBOX_DB_POOL_SIZE when it is malformed
 */
export function poolSize(roleDefault: number, env: NodeJS.ProcessEnv = process.env): number {
  return env[EnvVar.dbPoolSize]?.trim() ? readSetting(EnvVar.dbPoolSize, env) : roleDefault;
}
