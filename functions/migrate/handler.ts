/**
 * Deploy-time migrate function (run by a CDK Trigger before the schedules start): applies the
 * schema migrations and creates the least-privilege roles. It connects with the database's admin
 * secret, read from Secrets Manager at run time (the environment holds only the secret's ARN).
 */

import { Logger } from '@aws-lambda-powertools/logger';
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { EnvVar, migrateConfigSchema, parseEnv, ServiceName } from '../../shared/platform/index.ts';
import { migrateWithRoles } from '../../shared/relay/operations/index.ts';

const env = parseEnv(migrateConfigSchema, process.env);
const logger = new Logger({ serviceName: ServiceName.migrate });
const secrets = new SecretsManagerClient({});

/**
 * Trigger handler: applies pending migrations, then ensures the roles.
 * @returns the names of the migrations applied by this run
 * @throws when the secret cannot be read or a migration fails (the deployment then fails)
 */
export async function handler(): Promise<{ applied: string[] }> {
  const secret = await secrets.send(new GetSecretValueCommand({ SecretId: env[EnvVar.adminSecretArn] }));
  const { username, password, port } = JSON.parse(secret.SecretString ?? '{}') as {
    username: string;
    password: string;
    port?: number;
  };
  // verify-full in both drivers: node-pg-migrate's `pg` and our `postgres` check the certificate
  // chain and the host name the same way (with `require`, `pg` verified and `postgres` did not).
  // The Amazon RDS CA comes from Lambda's /var/runtime/ca-cert.pem through NODE_EXTRA_CA_CERTS.
  const url = `postgres://${encodeURIComponent(username)}:${encodeURIComponent(password)}@${env[EnvVar.adminHost]}:${port ?? 5432}/${encodeURIComponent(env[EnvVar.adminDatabase])}?sslmode=verify-full`;
  const applied = await migrateWithRoles(url, {
    roles: {
      relay: env[EnvVar.relayRole],
      monitor: env[EnvVar.monitorRole],
      producer: env[EnvVar.producerRole],
      consumer: env[EnvVar.consumerRole],
    },
    consumers: env[EnvVar.inboxConsumers],
    relayDeletesPublished: env[EnvVar.publishedRetentionDays] === 0,
    log: (line) => logger.info(line),
  });
  logger.info('migrations applied and roles ensured', { applied });
  return { applied };
}
