/**
 * Reading settings from the environment: the number helpers every setting's schema is made with,
 * and {@link parseEnv}, which reports a refused value with what the variable accepts. Apart from
 * config.ts (every setting) so that a bundle that reads only the database's settings (a consumer's)
 * carries neither the other roles' schemas nor their messages.
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
import { EnvVar } from './names.ts';

// zod/mini leaves the messages of its built-in checks to a locale; this is the English one that
// the full build loads by default, so the messages are the same as before.
z.config(en());

/**
 * A whole-number setting from `min` to `max`. `unit` says what is counted; settings whose name ends
 * in `_MS`, `_SECONDS`, `_DAYS` or `_BYTES` get their unit from the name (see {@link parseEnv}).
 */
export const int = (min: number, max: number, unit?: string) =>
  z.coerce.number().check(z.int(), z.minimum(min), z.maximum(max), ...(unit ? [z.describe(unit)] : []));

/** A number setting (not necessarily whole) from `min` to `max`. */
export const num = (min: number, max: number) => z.coerce.number().check(z.minimum(min), z.maximum(max));

/** A required non-empty string. */
export const required = () => z.string().check(z.minLength(1));

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
  // Read from zod's core definitions, which the full build and zod/mini share.
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

/** What a required variable holds and where to get it, said when it is unset. */
const REQUIRED_HINTS: Partial<Record<string, string>> = {
  [EnvVar.eventBusName]:
    'the name or ARN of the EventBridge event bus to publish to; for a local bus, `npx outbox bus` ' +
    '(the relay package) prints the exports to set',
};

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
    if (got === undefined) {
      const what = REQUIRED_HINTS[variable];
      throw new OutboxConfigError(variable, what === undefined ? 'is required' : `is required: ${what}`);
    }
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
