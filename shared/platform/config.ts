/**
 * The configuration contract (see README "Configuration"): every variable, its default and its
 * validation, read once at cold start. zod does the parsing so that a bad value fails with a
 * message naming the variable instead of surfacing later as NaN or undefined.
 *
 * `zod/mini`, not `zod`: the full build attaches every method to every schema, so importing it
 * pulls all of zod into a bundle, 459 of the relay bundle's 886 KiB; `zod/mini`'s functions are
 * tree-shaken to what is used (about 25 KiB with the English messages).
 */
import { en } from 'zod/locales';
import * as z from 'zod/mini';
import {
  type $ZodCheckGreaterThanDef,
  type $ZodCheckLessThanDef,
  type $ZodCheckNumberFormatDef,
  type $ZodDefaultDef,
  type $ZodEnumDef,
  type $ZodNumberDef,
  type $ZodObject,
  type $ZodOptionalDef,
  type $ZodType,
  globalRegistry,
  type output,
} from 'zod/v4/core';
import { OutboxConfigError } from './errors.ts';
import { DEFAULT_METRIC_NAMESPACE } from './names.ts';

// zod/mini leaves the messages of its built-in checks to a locale; this is the English one that
// the full build loads by default, so the messages are the same as before.
z.config(en());

/**
 * A whole-number setting from `min` to `max`. `unit` says what is counted; settings whose name ends
 * in `_MS`, `_SECONDS`, `_DAYS` or `_BYTES` get their unit from the name (see {@link parseEnv}).
 */
const int = (min: number, max: number, unit?: string) =>
  z.coerce.number().check(z.int(), z.minimum(min), z.maximum(max), ...(unit ? [z.describe(unit)] : []));

/** A number setting (not necessarily whole) from `min` to `max`. */
const num = (min: number, max: number) => z.coerce.number().check(z.minimum(min), z.maximum(max));

/** Relay settings; the units are in the names (ms, seconds, bytes). */
export const relayConfigSchema = z.object({
  EVENT_BUS_NAME: z
    .string()
    .check(
      z.minLength(1, 'is required: the name or ARN of the EventBridge event bus'),
      z.maxLength(1_600),
      z.regex(
        /^(arn:aws[\w-]*:events:[\w-]+:\d{12}:event-bus\/)?[/.\-_A-Za-z0-9]{1,256}$/,
        'must be an event bus name ([/.-_A-Za-z0-9], at most 256) or its ARN',
      ),
    ),
  /** Rows claimed per batch. */
  OUTBOX_BATCH_SIZE: z._default(int(1, 10_000, 'aggregates claimed per pass'), 100),
  /**
   * Lease length in seconds: how long a claimed row stays with one relay before others may take
   * it. Short, because a live pass renews it while it works: the rows of a relay that died come
   * back this long after its last renewal.
   */
  OUTBOX_LEASE_SECONDS: z._default(int(5, 3_600), 8),
  /** Claims per row before it is dead-lettered. */
  OUTBOX_MAX_ATTEMPTS: z._default(int(1, 1_000, 'claims per event'), 10),
  /** First retry delay in ms; doubles per attempt, with full jitter. */
  OUTBOX_BACKOFF_BASE_MS: z._default(int(0, 3_600_000), 1_000),
  /** Cap on a retry delay, ms. */
  OUTBOX_BACKOFF_MAX_MS: z._default(int(0, 86_400_000), 300_000),
  /** PutEvents calls in flight at once. */
  OUTBOX_PUBLISH_CONCURRENCY: z._default(int(1, 64, 'PutEvents requests in flight'), 4),
  /** Passes run at once, so claims and marks overlap publishing. */
  OUTBOX_PIPELINE_DEPTH: z._default(int(1, 8, 'passes at once'), 2),
  /** Bytes per PutEvents request, as EventBridge counts them (1 MiB today; 262144 on older limits). */
  OUTBOX_MAX_REQUEST_BYTES: z._default(int(1_024, 1_048_576), 1_048_576),
  /** Events of one aggregate claimed together and sent one after another in a pass. */
  OUTBOX_PER_AGGREGATE_LIMIT: z._default(int(1, 1_000, 'events per aggregate per pass'), 10),
  /** `aggregate`: per-aggregate publication order. `none`: no ordering, plain batch claims. */
  OUTBOX_ORDERING: z._default(z.enum(['aggregate', 'none']), 'aggregate'),
  /** `continue`: later events of a dead-lettered aggregate go on. `block`: they wait for an operator. */
  OUTBOX_DEAD_LETTER_POLICY: z._default(z.enum(['continue', 'block']), 'continue'),
  /** Wait between polls when the outbox is empty, ms. */
  OUTBOX_POLL_INTERVAL_MS: z._default(int(10, 60_000), 200),
  /** CloudWatch namespace of the relay's metrics. */
  OUTBOX_METRIC_NAMESPACE: z._default(
    z.string().check(z.minLength(1), z.maxLength(255)),
    DEFAULT_METRIC_NAMESPACE,
  ),
});

/** The relay's settings in the shape the relay core takes. */
export interface RelaySettings {
  eventBusName: string;
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
  metricNamespace: string;
}

/**
 * Reads and validates the relay's environment.
 * @param env defaults to `process.env`
 * @throws {OutboxConfigError} naming the first variable that is missing or malformed
 */
export function loadRelaySettings(env: NodeJS.ProcessEnv = process.env): RelaySettings {
  const e = parseEnv(relayConfigSchema, env);
  return {
    eventBusName: e.EVENT_BUS_NAME,
    batchSize: e.OUTBOX_BATCH_SIZE,
    leaseSeconds: e.OUTBOX_LEASE_SECONDS,
    maxAttempts: e.OUTBOX_MAX_ATTEMPTS,
    backoffBaseMs: e.OUTBOX_BACKOFF_BASE_MS,
    backoffMaxMs: e.OUTBOX_BACKOFF_MAX_MS,
    publishConcurrency: e.OUTBOX_PUBLISH_CONCURRENCY,
    pipelineDepth: e.OUTBOX_PIPELINE_DEPTH,
    maxRequestBytes: e.OUTBOX_MAX_REQUEST_BYTES,
    perAggregateLimit: e.OUTBOX_PER_AGGREGATE_LIMIT,
    ordering: e.OUTBOX_ORDERING,
    deadLetterPolicy: e.OUTBOX_DEAD_LETTER_POLICY,
    pollIntervalMs: e.OUTBOX_POLL_INTERVAL_MS,
    metricNamespace: e.OUTBOX_METRIC_NAMESPACE,
  };
}

/** Units implied by a variable's name, for settings that carry no description of their own. */
const UNIT_SUFFIXES: [RegExp, string][] = [
  [/_MS$/, 'ms'],
  [/_SECONDS$/, 'seconds'],
  [/_DAYS$/, 'days'],
  [/_BYTES$/, 'bytes'],
];

/**
 * What a number or enum setting accepts, in words, from its schema ("a whole number from 1 to
 * 10000 (aggregates claimed per pass)", "one of aggregate, none"), and its default. The unit is the
 * schema's description, else the name's suffix. Undefined for other settings (they carry their own
 * messages).
 */
function describeSetting(
  variable: string,
  schema: $ZodType | undefined,
): { accepts: string; fallback: unknown } | undefined {
  // Read from zod's core definitions, which the full build and zod/mini share (the migrate
  // handler still passes a full-build schema).
  let inner = schema;
  let fallback: unknown;
  while (inner && (inner._zod.def.type === 'default' || inner._zod.def.type === 'optional')) {
    const def = inner._zod.def as $ZodDefaultDef | $ZodOptionalDef;
    if (def.type === 'default') fallback ??= def.defaultValue;
    inner = def.innerType;
  }
  if (!inner) return undefined;
  if (inner._zod.def.type === 'enum') {
    return {
      accepts: `one of ${Object.values((inner._zod.def as $ZodEnumDef).entries).join(', ')}`,
      fallback,
    };
  }
  if (inner._zod.def.type !== 'number') return undefined;
  let min: number | undefined;
  let max: number | undefined;
  let isInt = false;
  for (const check of (inner._zod.def as $ZodNumberDef).checks ?? []) {
    const def = check._zod.def as $ZodCheckGreaterThanDef | $ZodCheckLessThanDef | $ZodCheckNumberFormatDef;
    if (def.check === 'greater_than') min = Number(def.value);
    else if (def.check === 'less_than') max = Number(def.value);
    else if (def.check === 'number_format') isInt = def.format.includes('int');
  }
  const unit =
    globalRegistry.get(inner)?.description ?? UNIT_SUFFIXES.find(([suffix]) => suffix.test(variable))?.[1];
  const range =
    min !== undefined && max !== undefined && Number.isFinite(max) ? ` from ${min} to ${max}` : '';
  return {
    accepts: `${isInt ? 'a whole number' : 'a number'}${range}${unit ? ` (${unit})` : ''}`,
    fallback,
  };
}

/**
 * Parses `env` with a zod object schema; an empty string counts as unset (so defaults apply).
 * A number or enum setting that is refused is reported with what it accepts and its default, e.g.
 * `OUTBOX_BATCH_SIZE: must be a whole number from 1 to 10000 (aggregates claimed per pass)
 * (got "abc"); unset it to use the default, 100`.
 * @throws {OutboxConfigError} naming the variable
 */
export function parseEnv<S extends $ZodObject>(schema: S, env: NodeJS.ProcessEnv): output<S> {
  const shape = schema._zod.def.shape;
  const cleaned: Record<string, string> = {};
  for (const key of Object.keys(shape)) {
    const value = env[key];
    if (value !== undefined && value.trim() !== '') cleaned[key] = value.trim();
  }
  const result = z.safeParse(schema, cleaned);
  if (!result.success) {
    const issue = result.error.issues[0];
    const variable = String(issue?.path[0] ?? 'environment');
    const got = cleaned[variable];
    if (got === undefined) throw new OutboxConfigError(variable, 'is required');
    const accepted = describeSetting(variable, shape[variable]);
    throw new OutboxConfigError(
      variable,
      accepted
        ? `must be ${accepted.accepts} (got ${JSON.stringify(got)})` +
            (accepted.fallback === undefined ? '' : `; unset it to use the default, ${accepted.fallback}`)
        : `${issue?.message ?? 'is invalid'} (got ${JSON.stringify(got)})`,
    );
  }
  return result.data;
}

/** Monitor settings (pruning and metrics); units in the names. */
export const monitorConfigSchema = z.object({
  /** Published rows are kept this long, days. */
  OUTBOX_PUBLISHED_RETENTION_DAYS: z._default(num(0.001, 3_650), 7),
  /** Dead-lettered rows are kept this long, days (longer: they wait for an operator). */
  OUTBOX_DEAD_LETTER_RETENTION_DAYS: z._default(num(0.001, 3_650), 30),
  /** Inbox records are kept this long, days (well above EventBridge's 24-hour retry window). */
  OUTBOX_INBOX_RETENTION_DAYS: z._default(num(2, 3_650), 30),
  /**
   * Idempotency keys are remembered this long after their event was enqueued, days, and at least as
   * long as the event is in the outbox (longer than the published rows' 7 by default).
   */
  OUTBOX_IDEMPOTENCY_RETENTION_DAYS: z._default(num(0.001, 3_650), 30),
  /** Rows per DELETE statement. */
  OUTBOX_PRUNE_BATCH_SIZE: z._default(int(1, 100_000, 'rows per DELETE'), 1_000),
  /** Longest a pruning run may take, ms (also capped by the Lambda's remaining time). */
  OUTBOX_PRUNE_TIME_BUDGET_MS: z._default(int(100, 900_000), 20_000),
  /** CloudWatch namespace of the metrics. */
  OUTBOX_METRIC_NAMESPACE: z._default(
    z.string().check(z.minLength(1), z.maxLength(255)),
    DEFAULT_METRIC_NAMESPACE,
  ),
  /** Name or ARN of the relay function the monitor invokes to scale out; unset: no scale-out. */
  OUTBOX_RELAY_FUNCTION_NAME: z.optional(
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
  OUTBOX_MAX_RELAYS: z._default(int(1, 100, 'relays'), 1),
  /** Pending events per relay the monitor wants running. */
  OUTBOX_BACKLOG_PER_RELAY: z._default(int(1, 100_000_000, 'pending events per relay'), 30_000),
  /** Longest an extra relay polls, counted from the start of the monitor's invocation, seconds. */
  OUTBOX_SCALE_OUT_SECONDS: z._default(int(10, 900), 50),
});

/** The monitor's settings in the shape the code takes. */
export interface MonitorSettings {
  publishedRetentionSeconds: number;
  deadLetterRetentionSeconds: number;
  inboxRetentionSeconds: number;
  idempotencyKeyRetentionSeconds: number;
  pruneBatchSize: number;
  pruneTimeBudgetMs: number;
  metricNamespace: string;
  /** Set when the monitor scales the relays out (a relay function is named and `maxRelays` > 1). */
  scaleOut?: {
    relayFunctionName: string;
    maxRelays: number;
    backlogPerRelay: number;
    forSeconds: number;
  };
}

/**
 * Reads and validates the monitor's environment.
 * @throws {OutboxConfigError} naming the first variable that is malformed
 */
export function loadMonitorSettings(env: NodeJS.ProcessEnv = process.env): MonitorSettings {
  const e = parseEnv(monitorConfigSchema, env);
  return {
    publishedRetentionSeconds: Math.round(e.OUTBOX_PUBLISHED_RETENTION_DAYS * 86_400),
    deadLetterRetentionSeconds: Math.round(e.OUTBOX_DEAD_LETTER_RETENTION_DAYS * 86_400),
    inboxRetentionSeconds: Math.round(e.OUTBOX_INBOX_RETENTION_DAYS * 86_400),
    idempotencyKeyRetentionSeconds: Math.round(e.OUTBOX_IDEMPOTENCY_RETENTION_DAYS * 86_400),
    pruneBatchSize: e.OUTBOX_PRUNE_BATCH_SIZE,
    pruneTimeBudgetMs: e.OUTBOX_PRUNE_TIME_BUDGET_MS,
    metricNamespace: e.OUTBOX_METRIC_NAMESPACE,
    ...(e.OUTBOX_RELAY_FUNCTION_NAME && e.OUTBOX_MAX_RELAYS > 1
      ? {
          scaleOut: {
            relayFunctionName: e.OUTBOX_RELAY_FUNCTION_NAME,
            maxRelays: e.OUTBOX_MAX_RELAYS,
            backlogPerRelay: e.OUTBOX_BACKLOG_PER_RELAY,
            forSeconds: e.OUTBOX_SCALE_OUT_SECONDS,
          },
        }
      : {}),
  };
}
