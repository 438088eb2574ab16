/**
 * Least-privilege database roles for a deployment, created by the migrate function after the
 * schema migrations (roles are cluster-wide, so they are not part of the numbered migrations):
 * - relay: reads and updates `outbox`, nothing else;
 * - monitor: reads `outbox` and deletes expired rows;
 * - producer: inserts events (and bumps the per-aggregate sequence counter, and remembers
 *   idempotency keys), directly or through `outbox_enqueue`;
 * - consumer: the inbox tables, and re-applying or discarding its parked events.
 * Each logs in through RDS Proxy with IAM (`rds_iam`, granted where it exists, i.e. on RDS), and
 * gets its statement timeout as a role default, so clients need no `SET` (which would pin).
 */
import type { Queryable } from '../platform/index.ts';
import {
  connect,
  DEFAULT_ROLES,
  databasePasswords,
  migrate,
  type OutboxRoles,
  redactError,
} from '../platform/index.ts';

/**
 * Creates the roles if missing and (re)applies their grants; safe to run on every deploy.
 * @param statementTimeoutMs role default `statement_timeout`
 */
export async function ensureRoles(
  sql: Queryable,
  roles: OutboxRoles = DEFAULT_ROLES,
  statementTimeoutMs = 15_000,
): Promise<void> {
  const grants: [string, string[]][] = [
    [roles.relay, ['grant select, update on outbox to %I']],
    [
      roles.monitor,
      [
        'grant select, delete on outbox to %I',
        'grant select, delete on inbox_message to %I',
        // the inbox's order state, pruned with its records (inbox-prune.ts)
        'grant select, delete on inbox_aggregate, inbox_gap to %I',
        'grant select, delete on outbox_idempotency_key to %I',
      ],
    ],
    [
      roles.producer,
      [
        'grant select, insert on outbox to %I',
        'grant select, insert, update on outbox_aggregate to %I',
        'grant select, insert on outbox_idempotency_key to %I',
        // outbox_enqueue runs with the caller's rights (security invoker): the grants above are
        // what it needs; EXECUTE is named so a database that revoked it from PUBLIC still works.
        'grant execute on function outbox_enqueue, outbox_enqueue_many, outbox_enqueue_check, outbox_enqueue_reject, outbox_json_bytes to %I',
      ],
    ],
    [
      roles.consumer,
      [
        // The inbox, and the operator's `outbox inbox parked list|replay|discard` (an update of
        // the record's outcome): nothing here deletes a record, which only the monitor prunes.
        'grant select, insert, update on inbox_message to %I',
        'grant select, insert, update on inbox_aggregate to %I',
        'grant select, insert, update, delete on inbox_gap to %I',
      ],
    ],
  ];
  for (const [role, statements] of grants) {
    // DDL takes no bind parameters: outbox_ensure_role (migration 004) quotes names with format().
    await sql`select outbox_ensure_role(${role}, ${statementTimeoutMs}, ${statements}::text[])`;
  }
}

/**
 * What the deploy-time migrate function (the CDK Trigger) does, and `outbox migrate --roles` does
 * for a database you bring yourself: applies pending migrations, then creates or updates the roles.
 * @param url admin connection string (a user that may create roles); include `sslmode=verify-full`
 *   for a server reached over the network
 * @returns the names of the migrations applied now
 * @throws the database's error; migrations apply in one transaction, roles are idempotent
 */
export async function migrateWithRoles(
  url: string | undefined,
  options: { roles?: OutboxRoles; statementTimeoutMs?: number; log?: (line: string) => void } = {},
): Promise<string[]> {
  const applied = await migrate(url, { log: options.log ?? (() => {}) });
  const sql = connect({ ...(url ? { url } : {}), max: 1, env: url ? {} : process.env });
  try {
    await ensureRoles(sql, options.roles ?? DEFAULT_ROLES, options.statementTimeoutMs);
  } catch (error) {
    // The deploy-time function logs what it throws; the admin password must not be in it.
    throw redactError(error, databasePasswords(process.env, url));
  } finally {
    await sql.end({ timeout: 5 });
  }
  return applied;
}
