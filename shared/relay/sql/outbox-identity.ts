/**
 * The outbox's id (migration 031), which the relay writes into every event as `metadata.outboxId`
 * so that consumers keep one chain per outbox (docs/inbox-order.md#two-outboxes-one-consumer).
 */
import type { ConnectionPool, Sql } from '../../platform/index.ts';

/**
 * Reads the id: a uuid in its text form, or undefined when the database has none yet
 * (`undefined_table`: migration 031 has not run) or the session's role may not read it
 * (`insufficient_privilege`: a role of your own that `outbox migrate --roles` did not grant).
 * @throws any other database error
 */
export async function readOutboxId(sql: Sql): Promise<string | undefined> {
  try {
    const [row] = await sql<{ outbox_id: string }[]>`
      select outbox_id::text as outbox_id from outbox.outbox_identity`;
    return row?.outbox_id;
  } catch (error) {
    const code = (error as { code?: unknown }).code;
    if (code === '42P01' || code === '42501' || code === '3F000') return undefined;
    throw error;
  }
}

/** How long a database without an id (or a role that may not read it) is believed, ms. */
const ABSENT_FOR_MS = 60_000;

const known = new WeakMap<object, { id: string | undefined; at: number }>();

/**
 * The outbox's id, read once per pool (one round trip in a process's life: a warm Lambda reads it
 * at its first claim), or again a minute after the database had none, so that a relay started
 * before `outbox migrate` names its outbox soon after it ran.
 * @param pool the pool the id is remembered for; `read` runs on one of its sessions
 */
export async function outboxIdOf(
  pool: Sql | ConnectionPool,
  read: () => Promise<string | undefined>,
): Promise<string | undefined> {
  const seen = known.get(pool);
  if (seen && (seen.id !== undefined || performance.now() - seen.at < ABSENT_FOR_MS)) return seen.id;
  const id = await read();
  known.set(pool, { id, at: performance.now() });
  return id;
}
