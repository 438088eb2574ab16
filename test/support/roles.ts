/**
 * The deployment roles for one test file: created with the code the Trigger runs (`ensureRoles`),
 * named with a random suffix (roles are cluster-wide, and test files run at once), and able to log
 * in with a password (in AWS they log in with IAM tokens; the embedded server checks a password).
 */
import { randomBytes } from 'node:crypto';
import { connect, type OutboxRoles, type Sql } from '../../shared/platform/index.ts';
import { consumerRoleName, ensureRoles } from '../../shared/relay/operations/index.ts';
import type { TestDatabase } from './db.ts';

/** Roles of a test file, and pools logged in as them. */
export interface TestRoles {
  roles: OutboxRoles;
  /** The role of one of the consumers given to {@link createTestRoles} (`<roles.consumer>_<name>`). */
  consumerRole(consumer: string): string;
  /** The role's connection string. */
  urlOf(role: string): string;
  /** A pool logged in as `role`, with the settings the functions use; closed by {@link drop}. */
  connectAs(role: string): Sql;
  /** Closes the pools and drops the roles. */
  drop(): Promise<void>;
}

/**
 * Creates the roles (twice, as two deploys would) with a role-default statement timeout of 7 s.
 * @param options.consumers inbox consumers that get a role of their own (`--consumer`)
 * @param options.relayDeletesPublished the relay role may delete outbox rows (no published history)
 */
export async function createTestRoles(
  db: TestDatabase,
  options: { consumers?: readonly string[]; relayDeletesPublished?: boolean } = {},
): Promise<TestRoles> {
  const suffix = randomBytes(4).toString('hex');
  const roles: OutboxRoles = {
    relay: `relay_${suffix}`,
    monitor: `monitor_${suffix}`,
    producer: `producer_${suffix}`,
    consumer: `consumer_${suffix}`,
  };
  const consumers = options.consumers ?? [];
  const ensure = { consumers, relayDeletesPublished: options.relayDeletesPublished ?? false };
  await ensureRoles(db.sql, roles, 7_000, ensure);
  await ensureRoles(db.sql, roles, 7_000, ensure); // idempotent: a second deploy changes nothing
  const password = `test-${suffix}`;
  const all = [...Object.values(roles), ...consumers.map((c) => consumerRoleName(c, roles))];
  for (const role of all) await db.sql.unsafe(`alter role "${role}" password '${password}'`);
  const pools: Sql[] = [];
  const urlOf = (role: string) => {
    const url = new URL(db.url);
    url.username = role;
    url.password = password;
    return url.toString();
  };
  return {
    roles,
    consumerRole: (consumer) => consumerRoleName(consumer, roles),
    urlOf,
    connectAs(role) {
      // No search_path sent: each role's own default, as in AWS behind RDS Proxy (the relay's and
      // the monitor's is OUTBOX_SEARCH_PATH, from ensureRoles; a producer's or a consumer's is the
      // server's, and their statements name the outbox's schema).
      const pool = connect({ url: urlOf(role), max: 2, env: {} });
      pools.push(pool);
      return pool;
    },
    async drop() {
      for (const pool of pools) await pool.end({ timeout: 1 });
      for (const r of all) {
        await db.sql.unsafe(`drop owned by "${r}"; drop role if exists "${r}"`).catch(() => {});
      }
    },
  };
}
