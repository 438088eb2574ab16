/**
 * What the CLI prints for an error that ended a command, and its exit status, for both commands
 * (`outbox` of the relay package and `outbox-inbox` of the consumer's). Each message says what
 * happened and what to do; Postgres errors are recognised by SQLSTATE, never by message text.
 */
import {
  databaseTarget,
  describeConnectionFailure,
  isConnectFailure,
  sameConnectionSettings,
} from '../connection-url.ts';
import { ConsumerFunctionError, OutboxConfigError, OutboxError, OutboxSchemaError } from '../errors.ts';
import { EnvVar } from '../names.ts';

/** Exit statuses of the `outbox` command. */
export const EXIT = {
  ok: 0,
  /** The command ran and failed: the database, the bus, invalid input, nothing published. */
  failure: 1,
  /** The command was called wrongly: an unknown option, a bad value, a missing or malformed variable. */
  usage: 2,
} as const;

/**
 * What to try next when no database answered: with IAM logins (OUTBOX_DB_IAM_AUTH=true, the deployed
 * database, docs/operations.md#connect-the-cli-to-the-deployed-database) the network path and the
 * PG* variables; otherwise a local Postgres ({@link LOCAL_DATABASE_HINT}).
 */
export function connectionHint(env: NodeJS.ProcessEnv): string {
  if (env[EnvVar.iamAuth] === 'true' && env[EnvVar.databaseUrl]) {
    return 'The runbook unsets DATABASE_URL for IAM logins (docs/operations.md, "Connect the CLI to the deployed database").';
  }
  if (env[EnvVar.iamAuth] === 'true') {
    return (
      'With OUTBOX_DB_IAM_AUTH=true the CLI logs in to PGHOST:PGPORT as PGUSER with an IAM token: check the ' +
      'port forwarding or bastion, the PG* variables and AWS_REGION (docs/operations.md, "Connect the CLI to the deployed database").'
    );
  }
  return LOCAL_DATABASE_HINT;
}

/** How to get a database when none is reachable; the checkout's `npm run db` starts one. */
export const LOCAL_DATABASE_HINT =
  'For a local Postgres that keeps its data between runs, run `npm run db` in a checkout of ' +
  'outbox-relay-aws and export the DATABASE_URL it prints.';

/**
 * SQLSTATEs that mean the schema is missing or older than this code: undefined table (42P01),
 * column (42703) or function (42883), or no schema `outbox` (3F000, before migration 024).
 */
const SCHEMA_BEHIND = new Set(['42P01', '42703', '42883', '3F000']);

/** The message (possibly several lines, without the `error: ` prefix) and exit status for `error`. */
export function explainError(thrown: unknown, env: NodeJS.ProcessEnv): { message: string; exitCode: number } {
  // The library's schema error (from enqueue) is explained below like the driver's own, with the
  // database the command used.
  const error = thrown instanceof OutboxSchemaError ? thrown.cause : thrown;
  if (error instanceof OutboxConfigError) return { message: error.message, exitCode: EXIT.usage };
  // A --function-name that is not the consumer's is a usage error; one whose configuration could
  // not be read (the Lambda API's error is the cause) a failure.
  if (error instanceof ConsumerFunctionError) {
    return { message: error.message, exitCode: error.cause === undefined ? EXIT.usage : EXIT.failure };
  }
  if (error instanceof OutboxError) return { message: error.message, exitCode: EXIT.failure };
  const e = error as Error & { code?: string };
  if (isConnectFailure(e)) {
    return {
      message: `${describeConnectionFailure(e, env)}\n  ${connectionHint(env)}`,
      exitCode: EXIT.failure,
    };
  }
  if (typeof e?.code === 'string' && SCHEMA_BEHIND.has(e.code)) {
    const target = databaseTarget(env);
    const what =
      e.code === '42P01' || e.code === '3F000'
        ? 'the outbox tables are missing from'
        : 'the outbox schema is older than this version of outbox in';
    // Since migration 024 the tables live in schema outbox, which sessions find through their
    // search_path: a user without USAGE on it gets the same 42P01 as a database never migrated.
    const orPrivilege =
      e.code === '42P01' || e.code === '3F000'
        ? ` Migrated already? Then the database user ${target.user} (from ${target.from}) may not use schema outbox: ` +
          'each task has its user (docs/operations.md, "the user for each task"), and `outbox migrate --roles` grants them.'
        : '';
    return {
      message:
        `${what} database "${target.database}" at ${target.address} (${e.message}, ${e.code}): ` +
        `run \`outbox migrate\` first, ${sameConnectionSettings(env)}.${orPrivilege}`,
      exitCode: EXIT.failure,
    };
  }
  if (e?.code === '42501') {
    // insufficient_privilege: most often `migrate --roles` as a user that may not create roles, or
    // a command run as a deployment role that lacks the grant (see docs/relay-construct.md#grants-that-are-yours-to-make).
    return {
      message:
        `${e.message} (42501): the database user ${databaseTarget(env).user} (from ${databaseTarget(env).from}) lacks a privilege this command needs. ` +
        'Each task has its user (docs/operations.md, "the user for each task": outbox_monitor reads status and lists dead letters, ' +
        'outbox_relay shows one, replay and discard need the migrating role or one granted them); ' +
        '`outbox migrate --roles` needs a user that may create roles (the RDS master user, or CREATEROLE).',
      exitCode: EXIT.failure,
    };
  }
  const text = e instanceof Error ? e.message || e.name : String(error);
  return { message: `${text}${e?.code ? ` (${e.code})` : ''}`, exitCode: EXIT.failure };
}
