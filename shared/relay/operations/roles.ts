/**
 * Least-privilege database roles for a deployment, created by the migrate function after the
 * schema migrations (roles are cluster-wide, so they are not part of the numbered migrations).
 * Each can do exactly its work, also where PUBLIC's default privileges were revoked (`revoke
 * execute on all functions in schema public from public`, `revoke all on schema public from
 * public`), and reads nothing its work does not need:
 * - relay: reads `outbox` and writes only the columns of a row's delivery state (lease, attempts,
 *   backoff, outcome); it cannot change an event. With no published history
 *   (`relayDeletesPublished`, for `OUTBOX_PUBLISHED_RETENTION_DAYS=0`) it may also delete rows:
 *   the relay then deletes each row it published, in the statement that would have marked it;
 * - monitor: reads `outbox` without the events' payloads and trace headers, deletes expired rows,
 *   inbox records (without reading a parked event's payload), the inbox's order state and
 *   idempotency keys;
 * - producer: executes `outbox_enqueue` and `outbox_enqueue_many` (which run with their owner's
 *   rights, migration 009) and has no privilege on any table: it writes events only through them,
 *   and reads no other service's events;
 * - consumer: the inbox tables, and re-applying or discarding its parked events (an update of the
 *   record's outcome). The shared consumer role touches every consumer's rows (as before migration
 *   020); a consumer's own role (`<consumer role>_<consumer>`, {@link consumerRoleName}, made for
 *   each name in `options.consumers`) has the same grants but touches only its consumer's rows:
 *   the inbox tables have row-level security, with a policy per role (migration 020): `consumer =
 *   '<consumer>'` for a consumer's own role, every row for the monitor and the shared role. No
 *   inbox role holds a table-level UPDATE or DELETE, with which it could lock the tables against
 *   every other consumer (migration 026); its idle transactions end after
 *   `CONSUMER_IDLE_IN_TRANSACTION_TIMEOUT_MS`.
 * Each logs in through RDS Proxy with IAM (`rds_iam`, granted where it exists, i.e. on RDS), and
 * gets its statement timeout as a role default, so clients need no `SET` (which would pin).
 * Grants are revoked first where older versions gave more, so a redeploy takes them away.
 */
import type { Queryable } from '../../platform/index.ts';

/** The role-default search_path of the relay and monitor roles (OUTBOX_SEARCH_PATH). */
const SEARCH_PATH_DEFAULT = `alter role %I set search_path = ${OUTBOX_SEARCH_PATH}`;

import {
  CONSUMER_IDLE_IN_TRANSACTION_TIMEOUT_MS,
  connect,
  DEFAULT_ROLES,
  databasePasswords,
  migrate,
  OUTBOX_SEARCH_PATH,
  OutboxConfigError,
  type OutboxRoles,
  RELAY_IDLE_IN_TRANSACTION_TIMEOUT_MS,
  redactError,
} from '../../platform/index.ts';

/** Longest role name Postgres keeps (NAMEDATALEN - 1 bytes); a longer one would be cut short. */
const MAX_ROLE_NAME_BYTES = 63;

/** The tables whose rows belong to one consumer, each with a row-level security policy per role. */
const INBOX_TABLES = ['inbox_message', 'inbox_aggregate', 'inbox_gap', 'inbox_failed'] as const;

/**
 * The database role of one inbox consumer: `<roles.consumer>_<consumer>`, e.g.
 * `outbox_consumer_billing` for the consumer `billing` (the inbox's `consumer` option).
 * @throws OutboxConfigError (`consumer`) for an empty name, a comma, or a role name over Postgres's 63 bytes
 */
export function consumerRoleName(
  consumer: string,
  roles: Pick<OutboxRoles, 'consumer'> = DEFAULT_ROLES,
): string {
  if (consumer.trim() === '') {
    throw new OutboxConfigError(
      'consumer',
      `expected a consumer's name (its inbox \`consumer\` option), got "${consumer}"`,
    );
  }
  // The construct refuses a comma too: lists of consumers in its settings are comma-separated.
  if (consumer.includes(',')) {
    throw new OutboxConfigError('consumer', `expected a consumer's name without a comma, got "${consumer}"`);
  }
  const role = `${roles.consumer}_${consumer}`;
  if (Buffer.byteLength(role) > MAX_ROLE_NAME_BYTES) {
    throw new OutboxConfigError(
      'consumer',
      `the role of consumer "${consumer}" would be named "${role}", ${Buffer.byteLength(role)} bytes; Postgres keeps at most ${MAX_ROLE_NAME_BYTES}`,
    );
  }
  return role;
}

/** Options of {@link ensureRoles}. */
export interface EnsureRolesOptions {
  /**
   * Inbox consumers (their `consumer` option) that get a role of their own, named by
   * {@link consumerRoleName}, touching only their own inbox rows.
   * @default none: every consumer logs in as the shared consumer role
   */
  consumers?: readonly string[];
  /**
   * The deployment keeps no published history (`OUTBOX_PUBLISHED_RETENTION_DAYS=0`): the relay role
   * gets DELETE on the outbox, to delete each row it published (docs/configuration.md#no-published-history).
   * Otherwise it has none, and a deploy that turns the mode off takes it away.
   * @default false
   */
  relayDeletesPublished?: boolean;
}

/** The columns of `outbox` the relay writes: a row's delivery state, never the event. */
export const RELAY_WRITES = [
  'available_at',
  'published_at',
  'attempts',
  'lease_token',
  'lease_expires_at',
  'last_error',
  'dead_lettered_at',
] as const;

/** The columns of `outbox` the monitor reads (to prune and count): all but the event's data. */
export const MONITOR_READS = [
  'id',
  'event_id',
  'aggregate_type',
  'aggregate_id',
  'sequence',
  'event_type',
  'source',
  'idempotency_key',
  'created_at',
  'available_at',
  'published_at',
  'attempts',
  'lease_token',
  'lease_expires_at',
  'last_error',
  'dead_lettered_at',
  'discarded_at',
] as const;

/**
 * The grants of a role that runs inboxes: the shared consumer role's and each consumer's own.
 * Which consumers' rows it touches is its row-level security policy's business.
 *
 * No table-level UPDATE or DELETE: LOCK TABLE checks table-level privileges, and either one lets a
 * role take any lock on the table, ACCESS EXCLUSIVE included, and hold it in a transaction it leaves
 * open: every other consumer's inbox would wait. With column-level UPDATE, and the deletes through
 * functions that check whose rows they are (migration 026), the strongest table lock an inbox role
 * can take is ROW EXCLUSIVE (its INSERT), which none of the inbox's statements waits for.
 */
const INBOX_GRANTS = [
  // What older versions granted, taken away (a redeploy narrows an existing role).
  'revoke update, delete, truncate on inbox_message, inbox_aggregate, inbox_gap, inbox_failed from %I',
  // The inbox, and the operator's `outbox inbox parked list|replay|discard` (an update of the
  // record's outcome): nothing here deletes a record, which only the monitor prunes.
  'grant select, insert on inbox_message to %I',
  'grant update (outcome, event, reason, processed_at, holds_chain) on inbox_message to %I',
  'grant select, insert on inbox_aggregate to %I',
  // outbox_id: the first outbox to name itself adopts a chain kept before (migration 031)
  'grant update (last_sequence, updated_at, outbox_id) on inbox_aggregate to %I',
  'grant select, insert on inbox_gap to %I',
  'grant update (first_seen_at, last_seen_at, aggregate_type, aggregate_id, chain, position) on inbox_gap to %I',
  // the failure trace: written outside the invocation's transaction, deleted by the one that
  // applies the event; read by `outbox inbox failed list`
  'grant select, insert on inbox_failed to %I',
  'grant update (message_key, event, error_name, error_message, attempts, last_failed_at, handler_failures) on inbox_failed to %I',
  'grant execute on function outbox.outbox_inbox_forget_failed(text, text, text), outbox.outbox_inbox_forget_gap(text, text) to %I',
  // An invocation's transaction ends before the invocation does; one idle longer is cut off, its
  // locks with it. Lock waits end on their own too, whatever statement_timeout the session sets.
  `alter role %I set idle_in_transaction_session_timeout = '${CONSUMER_IDLE_IN_TRANSACTION_TIMEOUT_MS}ms'`,
];

/**
 * Creates the roles if missing and (re)applies their grants; safe to run on every deploy.
 * @param statementTimeoutMs role default `statement_timeout`
 * @throws OutboxConfigError for a consumer name {@link consumerRoleName} refuses, before any change
 */
export async function ensureRoles(
  sql: Queryable,
  roles: OutboxRoles = DEFAULT_ROLES,
  statementTimeoutMs = 15_000,
  options: EnsureRolesOptions = {},
): Promise<void> {
  const consumers = [...new Set(options.consumers ?? [])].map((consumer) => ({
    consumer,
    role: consumerRoleName(consumer, roles),
  }));
  // A lock wait ends by the statement timeout even in a session that raised its own
  // statement_timeout: no relay or inbox session waits on a lock for longer.
  const lockTimeout = `alter role %I set lock_timeout = '${statementTimeoutMs}ms'`;
  const grants: [string, string[]][] = [
    [
      roles.relay,
      [
        'revoke all on outbox, outbox_aggregate, outbox_idempotency_key from %I',
        'grant select on outbox to %I',
        // the outbox's id, written into every event as metadata.outboxId (migration 031)
        'grant select on outbox_identity to %I',
        `grant update (${RELAY_WRITES.join(', ')}) on outbox to %I`,
        // No published history: a published row leaves in the statement that would have marked
        // it (sql/mark-published.ts), guarded by the relay's lease token like every other write.
        ...(options.relayDeletesPublished ? ['grant delete on outbox to %I'] : []),
        // Short statements, every few hundred ms: a claim priced past jit_above_cost (a large
        // OUTBOX_BATCH_SIZE) would compile itself at every call, ~30 ms of the database's CPU.
        // On the role, like the statement timeout: a SET would pin RDS Proxy sessions.
        'alter role %I set jit = off',
        // The claim planned at every call, for the table as it is now (RELAY_PLAN_CACHE_MODE):
        // for a pool of the user's own that prepares statements and sends no plan_cache_mode.
        'alter role %I set plan_cache_mode = force_custom_plan',
        // The claim's transaction never idles past a round trip; a relay frozen inside it is cut
        // off after a lease (RELAY_IDLE_IN_TRANSACTION_TIMEOUT_MS), with no SET (which would pin).
        `alter role %I set idle_in_transaction_session_timeout = '${RELAY_IDLE_IN_TRANSACTION_TIMEOUT_MS}ms'`,
        lockTimeout,
        // Its sessions resolve names only in pg_catalog and the outbox's schema, behind a pooler
        // too (where no startup search_path is sent): never through a schema a producer can write
        // (issue 43), and an older relay's unqualified statements find the moved tables (024).
        SEARCH_PATH_DEFAULT,
      ],
    ],
    [
      roles.monitor,
      [
        'revoke all on outbox from %I',
        `grant select (${MONITOR_READS.join(', ')}), delete on outbox to %I`,
        // prune keeps a dead letter until its aggregate has moved past it (a later sequence)
        'grant select on outbox_aggregate to %I',
        // inbox records: what pruning and the parked count read, not a parked event's `event`
        'revoke all on inbox_message from %I',
        'grant select (consumer, message_key, outcome, processed_at), delete on inbox_message to %I',
        // the inbox's order state, pruned with its records (shared/consumer/operations/parked-events.ts)
        'grant select, delete on inbox_aggregate, inbox_gap to %I',
        'grant select, delete on outbox_idempotency_key to %I',
        // failed inbox events: counted (InboxFailedCount) and pruned, their `event` never read
        'revoke all on inbox_failed from %I',
        'grant select (consumer, event_id, last_failed_at), delete on inbox_failed to %I',
        // as for the relay: its prune and count statements gain nothing from JIT
        'alter role %I set jit = off',
        SEARCH_PATH_DEFAULT,
        // the heartbeat (migration 030): one fixed event per interval, and nothing else enqueued
        'grant execute on function outbox_enqueue_heartbeat(integer) to %I',
      ],
    ],
    [
      roles.producer,
      [
        // Older versions let the producer write (and read) the tables itself.
        'revoke all on outbox, outbox_aggregate, outbox_idempotency_key from %I',
        // By signature: a same-named function a producer planted would make a bare name ambiguous.
        'revoke execute on function outbox_enqueue_check(text, text, text, text, jsonb, text, text, integer, integer), ' +
          'outbox_enqueue_reject(text, text, integer), outbox_json_bytes(jsonb) from %I',
        'grant execute on function outbox_enqueue(text, text, text, text, jsonb, text, text, integer), ' +
          'outbox_enqueue_many(text[], text[], text[], text[], jsonb[], text[], text[], integer) to %I',
      ],
    ],
    [roles.consumer, [...INBOX_GRANTS, lockTimeout]],
    ...consumers.map(({ role }): [string, string[]] => [role, [...INBOX_GRANTS, lockTimeout]]),
  ];
  for (const [role, statements] of grants) {
    // DDL takes no bind parameters: outbox_ensure_role (migrations 004, 017) quotes names with
    // format(). Typed arguments: an untyped one would let a planted outbox_ensure_role(text, text,
    // text[]) match better, and run with the admin's rights.
    await sql`select outbox_ensure_role(${role}::text, ${statementTimeoutMs}::integer, ${statements}::text[])`;
  }
  // Whose inbox rows each role touches: its row-level security policy on each inbox table
  // (migration 020; null: every consumer's). A consumer's own role is not made a member of the
  // shared one: Postgres 15 lets a member SET ROLE to it, and the shared role touches every row.
  // One call per table and policy, each its own transaction: a policy change locks its table
  // (ACCESS EXCLUSIVE, a few ms, waiting for running inbox transactions), and the function
  // changes nothing, taking no lock, when the policy is already so (every later deploy).
  const policies = [
    { role: roles.monitor, consumer: null },
    { role: roles.consumer, consumer: null },
    ...consumers,
  ];
  for (const p of policies) {
    for (const table of INBOX_TABLES) {
      await sql`select outbox_inbox_policy(${table}::regclass, ${p.role}::text, ${p.consumer}::text)`;
    }
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
  options: {
    roles?: OutboxRoles;
    statementTimeoutMs?: number;
    log?: (line: string) => void;
    /** Inbox consumers that get a role of their own ({@link EnsureRolesOptions.consumers}). */
    consumers?: readonly string[];
    /** {@link EnsureRolesOptions.relayDeletesPublished}. */
    relayDeletesPublished?: boolean;
  } = {},
): Promise<string[]> {
  const applied = await migrate(url, { log: options.log ?? (() => {}) });
  const sql = connect({
    ...(url ? { url } : {}),
    max: 1,
    env: url ? {} : process.env,
    searchPath: OUTBOX_SEARCH_PATH,
  });
  try {
    await ensureRoles(sql, options.roles ?? DEFAULT_ROLES, options.statementTimeoutMs, {
      consumers: options.consumers ?? [],
      relayDeletesPublished: options.relayDeletesPublished ?? false,
    });
  } catch (error) {
    // The deploy-time function logs what it throws; the admin password must not be in it.
    throw redactError(error, databasePasswords(process.env, url));
  } finally {
    await sql.end({ timeout: 5 });
  }
  return applied;
}
