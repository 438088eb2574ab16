/**
 * The database pool's settings (every role reads them: `connect`, `openPool`), by their
 * {@link EnvVar} names; config.ts holds them among every setting's schema.
 */
import * as z from 'zod/mini';
import { int } from './env-settings.ts';
import { EnvVar } from './names.ts';

/** The database's settings' schemas, keyed by variable. */
export const databaseSettingSchemas = {
  [EnvVar.databaseUrl]: z.optional(z.string()),
  /** Connections in the pool (the relay Lambda's default is its publish concurrency + 1, the monitor's 2). */
  [EnvVar.dbPoolSize]: z._default(int(1, 100, 'connections'), 4),
  /** Seconds to wait for a new connection; far below the Lambda timeout so a dead network fails fast. */
  [EnvVar.dbConnectTimeoutSeconds]: z._default(int(1, 120), 5),
  /** Per-statement limit, ms, enforced by the server. */
  [EnvVar.dbStatementTimeoutMs]: z._default(int(100, 600_000), 15_000),
  /** `true`: authenticate with an IAM token (RDS Proxy, or an RDS instance or Aurora cluster directly), over verified TLS. */
  [EnvVar.iamAuth]: z._default(z.enum(['true', 'false']), 'false'),
  /**
   * `transaction`: the database is reached through a transaction pooler (RDS Proxy, PgBouncer in
   * transaction mode, Supabase's or Neon's pooler): no prepared statements, no startup settings
   * but the application name, one statement in flight per connection. `none`: a direct connection.
   * Default: `transaction` with IAM auth (RDS Proxy), else `none`.
   */
  [EnvVar.dbPooler]: z.optional(z.enum(['none', 'transaction'])),
};

/** The database pool's settings (read by `connect` and `openPool`). */
export const databaseConfigSchema = z.object(databaseSettingSchemas);
