/**
 * Deploy-time migrate function (run by a CDK Trigger before the schedules start): applies the
 * schema migrations and creates the least-privilege roles. It connects with the database's admin
 * secret, read from Secrets Manager at run time (the environment holds only the secret's ARN).
 */

import { Logger } from '@aws-lambda-powertools/logger';
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { z } from 'zod';
import { parseEnv } from '../../shared/config.ts';
import { connect } from '../../shared/db.ts';
import { migrate } from '../../shared/migrate.ts';
import { ensureRoles } from '../../shared/roles.ts';

const env = parseEnv(
  z.object({
    DB_SECRET_ARN: z.string().min(1),
    DB_HOST: z.string().min(1),
    DB_NAME: z.string().min(1),
    OUTBOX_RELAY_ROLE: z.string().default('outbox_relay'),
    OUTBOX_MONITOR_ROLE: z.string().default('outbox_monitor'),
    OUTBOX_PRODUCER_ROLE: z.string().default('outbox_producer'),
  }),
  process.env,
);
const logger = new Logger({ serviceName: 'outbox-migrate' });
const secrets = new SecretsManagerClient({});

/**
 * Trigger handler: applies pending migrations, then ensures the roles.
 * @returns the names of the migrations applied by this run
 * @throws when the secret cannot be read or a migration fails (the deployment then fails)
 */
export async function handler(): Promise<{ applied: string[] }> {
  const secret = await secrets.send(new GetSecretValueCommand({ SecretId: env.DB_SECRET_ARN }));
  const { username, password, port } = JSON.parse(secret.SecretString ?? '{}') as {
    username: string;
    password: string;
    port?: number;
  };
  const url = `postgres://${encodeURIComponent(username)}:${encodeURIComponent(password)}@${env.DB_HOST}:${port ?? 5432}/${encodeURIComponent(env.DB_NAME)}?sslmode=require`;
  const applied = await migrate(url, { log: (line) => logger.info(line) });
  const sql = connect({ url, max: 1, env: {} });
  try {
    await ensureRoles(sql, {
      relay: env.OUTBOX_RELAY_ROLE,
      monitor: env.OUTBOX_MONITOR_ROLE,
      producer: env.OUTBOX_PRODUCER_ROLE,
    });
  } finally {
    await sql.end();
  }
  logger.info('migrations applied and roles ensured', { applied });
  return { applied };
}
