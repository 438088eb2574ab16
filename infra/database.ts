/**
 * Where and how the construct's functions reach Postgres (RDS Proxy, or an instance or cluster
 * directly, with IAM authentication and verified TLS), the deploy-time migration's props, and the
 * synth-time warnings about a proxy or cluster that would refuse the functions' IAM logins.
 */
import { Annotations, ArnFormat, Stack, Tokenization } from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as iam from 'aws-cdk-lib/aws-iam';
import * as rds from 'aws-cdk-lib/aws-rds';
import type * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import type { Construct } from 'constructs';
import { OutboxConfigError } from '../shared/platform/errors.ts';
import { DEFAULT_ROLES, EnvVar, LAMBDA_CA_BUNDLE } from '../shared/platform/names.ts';

/**
 * Where functions connect to Postgres, with IAM authentication and verified TLS: exactly one of
 * `proxy`, `instance` or `cluster`.
 *
 * - **`proxy`** (RDS Proxy): connections are pooled by the proxy across invocations and functions,
 *   so the database sees the proxy's connections, not one per Lambda container. It costs about
 *   $22 a month at the minimum (2 vCPUs billed), and the client runs in transaction-pooler mode (no
 *   named prepared statements, one statement in flight per connection).
 * - **`instance`** or **`cluster`** (direct): each warm Lambda container keeps its own connections
 *   (the relay up to OUTBOX_PUBLISH_CONCURRENCY + 1, 5 by default; the monitor 2) for up to 5 idle
 *   minutes and 10 to 13 minutes in all, so the database's `max_connections` must cover every
 *   container at the peak; every new connection signs an IAM token, which RDS and Aurora throttle at
 *   200 new IAM-authenticated connections per second (docs/database-access.md#without-a-proxy-iam-straight-to-the-instance-or-cluster).
 */
export interface OutboxDatabaseTarget {
  /**
   * RDS Proxy. It must require IAM authentication and TLS, and be able to log in to the database as
   * the relay's and the monitor's users: with end-to-end IAM authentication (`DefaultAuthScheme:
   * IAM_AUTH`), its role needs `rds-db:connect` on the instance for {@link OutboxRelay.databaseUsers};
   * otherwise it needs a Secrets Manager secret for each of them.
   * @default none: give `instance` or `cluster` instead
   */
  readonly proxy?: rds.IDatabaseProxy;
  /**
   * An RDS for PostgreSQL instance, reached directly (no proxy) with IAM authentication, which must
   * be on (`iamAuthentication: true`; an instance of the same app gets it from the construct's grant).
   * An imported instance needs `instanceEndpointAddress`, `port` and `instanceResourceId` (the
   * `rds-db:connect` ARN names it: `dbuser:db-…/<user>`).
   * @default none
   */
  readonly instance?: rds.IDatabaseInstance;
  /**
   * An Aurora PostgreSQL cluster, reached directly at its writer (cluster) endpoint with IAM
   * authentication, which must be on (`iamAuthentication: true`). An imported cluster needs
   * `clusterEndpointAddress`, `port` and `clusterResourceIdentifier` (`dbuser:cluster-…/<user>`).
   * @default none
   */
  readonly cluster?: rds.IDatabaseCluster;
}

/** How the functions reach Postgres: see {@link OutboxDatabaseTarget}. */
export interface OutboxDatabaseProps extends OutboxDatabaseTarget {
  /** Database name. */
  readonly databaseName: string;
  /**
   * Database user of the relay (its grants: shared/relay/operations/roles.ts).
   * @default 'outbox_relay' (DEFAULT_ROLES.relay)
   */
  readonly relayUser?: string;
  /**
   * Database user of the monitor (its grants: shared/relay/operations/roles.ts).
   * @default 'outbox_monitor' (DEFAULT_ROLES.monitor)
   */
  readonly monitorUser?: string;
}

/** How a function reaches Postgres, resolved from an {@link OutboxDatabaseTarget}. */
export interface OutboxDatabaseConnection {
  /** `proxy` through RDS Proxy, `direct` to an instance or a cluster. */
  readonly shape: 'proxy' | 'direct';
  /** Host name the functions connect to (and sign their IAM tokens for). */
  readonly host: string;
  /** Its port, as a string (a token until deploy time for an instance or a cluster of the app). */
  readonly port: string;
  /**
   * The variables a function needs to log in as `user`: `PGHOST`, `PGPORT`, `PGUSER`,
   * `OUTBOX_DB_IAM_AUTH=true`, `OUTBOX_DB_POOLER` (`transaction` behind the proxy, `none` direct) and
   * `NODE_EXTRA_CA_CERTS` (Lambda's CA bundle, which holds the Amazon RDS CAs).
   */
  environment(user: string): Record<string, string>;
  /** Grants `rds-db:connect` as `user`, on the proxy's id or the instance's or cluster's resource id. */
  grantConnect(grantee: iam.IGrantable, user: string): void;
  /**
   * The resource an IAM policy allows `rds-db:connect` on to log in as `user`:
   * `arn:aws:rds-db:<region>:<account>:dbuser:<prx-… | db-… | cluster-…>/<user>` (`*` for any user).
   * What {@link grantConnect} grants, for a person's policy (docs/operations.md#connect-the-cli-to-the-deployed-database).
   */
  connectArn(scope: Construct, user: string): string;
}

/**
 * An {@link OutboxConfigError} naming `prop`, whose message starts with the construct's name as
 * its other synth errors do (`OutboxRelay: database.instance: …`).
 */
function relayPropError(prop: string, problem: string): OutboxConfigError {
  const error = new OutboxConfigError(prop, problem);
  error.message = `OutboxRelay: ${error.message}`;
  return error;
}

/**
 * Resolves where functions connect and how they are allowed to; shared by {@link OutboxRelay} and
 * any function of your own that logs in the same way (the example consumer does).
 * @throws when the target names none or several of `proxy`, `instance` and `cluster`
 * @throws {OutboxConfigError} (`database.instance`) for an imported instance without `instanceResourceId`
 */
export function outboxDatabaseConnection(target: OutboxDatabaseTarget): OutboxDatabaseConnection {
  const given = (['proxy', 'instance', 'cluster'] as const).filter((k) => target[k] !== undefined);
  if (given.length !== 1) {
    throw new Error(
      `OutboxRelay: database must name exactly one of proxy, instance or cluster (got ${given.length === 0 ? 'none' : given.join(' and ')})`,
    );
  }
  const { proxy, instance, cluster } = target;
  // aws-cdk-lib only finds out at grantConnect, with an error that names neither the construct nor
  // the prop (an instance of the app always has it: a token).
  if (instance && instance.instanceResourceId === undefined) {
    throw relayPropError(
      'database.instance',
      'an imported instance needs instanceResourceId (db-…, the rds-db:connect ARN names it: ' +
        'dbuser:db-…/<user>): give it to DatabaseInstance.fromDatabaseInstanceAttributes ' +
        '(`aws rds describe-db-instances --query "DBInstances[].DbiResourceId"`)',
    );
  }
  const [host, port, grantConnect]: [string, string, OutboxDatabaseConnection['grantConnect']] = proxy
    ? // RDS Proxy listens on the engine's default port, 5432 for Postgres.
      [proxy.endpoint, '5432', (grantee, user) => proxy.grantConnect(grantee, user)]
    : instance
      ? [
          instance.dbInstanceEndpointAddress,
          instance.dbInstanceEndpointPort,
          (grantee, user) => instance.grantConnect(grantee, user),
        ]
      : [
          (cluster as rds.IDatabaseCluster).clusterEndpoint.hostname,
          Tokenization.stringifyNumber((cluster as rds.IDatabaseCluster).clusterEndpoint.port),
          (grantee, user) => (cluster as rds.IDatabaseCluster).grantConnect(grantee, user),
        ];
  const shape = proxy ? 'proxy' : 'direct';
  // The ids aws-cdk-lib's grantConnect names: the proxy's generated id (the last part of its ARN),
  // the instance's DbiResourceId, the cluster's resource id.
  const resourceId = (scope: Construct) =>
    proxy
      ? (Stack.of(scope).splitArn(proxy.dbProxyArn, ArnFormat.COLON_RESOURCE_NAME).resourceName as string)
      : instance
        ? instance.instanceResourceId
        : (cluster as rds.IDatabaseCluster).clusterResourceIdentifier;
  return {
    shape,
    host,
    port,
    environment: (user) => ({
      [EnvVar.pgHost]: host,
      [EnvVar.pgPort]: port,
      [EnvVar.pgUser]: user,
      [EnvVar.iamAuth]: 'true',
      // Behind the proxy, no session state (it would pin); direct, a session of our own: named
      // prepared statements and the statement timeout as a startup setting.
      [EnvVar.dbPooler]: shape === 'proxy' ? 'transaction' : 'none',
      [EnvVar.nodeExtraCaCerts]: LAMBDA_CA_BUNDLE,
    }),
    grantConnect,
    connectArn: (scope, user) =>
      Stack.of(scope).formatArn({
        service: 'rds-db',
        resource: 'dbuser',
        resourceName: `${resourceId(scope)}/${user}`,
        arnFormat: ArnFormat.COLON_RESOURCE_NAME,
      }),
  };
}

/**
 * Deploy-time migrations: applied by a CDK Trigger before the relay and monitor functions and their
 * schedules are created or updated. Each migration must work with the code already deployed
 * (expand/contract, see docs/deploying.md#migrations-on-update-expand-then-contract).
 */
export interface OutboxMigrationProps {
  /** Admin credentials (`username`, `password`, `port`) of the database, e.g. `instance.secret`. */
  readonly adminSecret: secretsmanager.ISecret;
  /**
   * Host of the database instance or the cluster's writer (migrations connect directly with the
   * admin secret, not through the IAM-only proxy).
   * @default the endpoint of `database.instance` or `database.cluster`; required with a proxy
   */
  readonly host?: string;
  /**
   * Security groups of the migrate function. The instance must accept them on its port, and they
   * must not be the relay's and monitor's groups: those reach the proxy only, and the migrate
   * function alone reaches the instance directly (it also needs Secrets Manager, through an
   * endpoint or NAT).
   */
  readonly securityGroups: ec2.ISecurityGroup[];
  /**
   * Constructs that must exist before migrating: the instance, the security group rules and the
   * endpoints the migrate function uses. The relay and monitor functions come after the migrations,
   * so list what they need as well (the proxy and its rules).
   * @default none
   */
  readonly executeAfter?: Construct[];
  /**
   * Inbox consumers (their `consumer` option) that get a database role of their own,
   * `outbox_consumer_<name>`, touching only their own inbox rows (docs/consumer-deploying.md#the-consumers-database-role);
   * the migrate function creates them as `outbox migrate --roles --consumer <name>` does. Their
   * functions log in as them: grant each `rds-db:connect` as that user.
   * @default none: consumers log in as the shared `outbox_consumer`, which touches every consumer's rows
   */
  readonly inboxConsumers?: string[];
}

/**
 * The migrate function's variable for {@link OutboxMigrationProps.inboxConsumers}, none when there
 * are none (so that a deployment without them synthesises as before).
 * @throws Error at synth for a name that is empty, holds a comma (the variable's separator), or
 *   makes a role name over Postgres's 63 bytes
 */
export function inboxConsumersEnvironment(migration: OutboxMigrationProps): Record<string, string> {
  const names = migration.inboxConsumers ?? [];
  for (const name of names) {
    const role = `${DEFAULT_ROLES.consumer}_${name}`;
    if (name.trim() === '' || name.includes(',') || Buffer.byteLength(role) > 63) {
      throw new Error(
        `migration.inboxConsumers: "${name}" cannot name a consumer's role (${role}): it must be non-empty, hold no comma, and make a role name of at most 63 bytes`,
      );
    }
  }
  return names.length > 0 ? { [EnvVar.inboxConsumers]: names.join(',') } : {};
}

/**
 * The relay and the monitor log in through the proxy as their own database users with IAM tokens.
 * A proxy defined in this app that authenticates with Secrets Manager secrets (`iamAuth` with a
 * `secrets` list, no `defaultAuthScheme: IAM_AUTH`) refuses them at run time; say so at synth.
 * (An imported proxy cannot be inspected.)
 */
export function warnOnProxyAuth(scope: Construct, proxy: rds.IDatabaseProxy): void {
  const cfn = proxy.node.defaultChild;
  if (!(cfn instanceof rds.CfnDBProxy) || cfn.defaultAuthScheme === 'IAM_AUTH') return;
  Annotations.of(scope).addWarningV2(
    'outbox-relay:proxy-auth',
    `The proxy ${proxy.node.path} authenticates to the database with secrets, so it refuses the relay's and the monitor's ` +
      'IAM logins as their own users. Set defaultAuthScheme: rds.DefaultAuthScheme.IAM_AUTH on it and grant its role ' +
      'rds-db:connect for OutboxRelay.databaseUsers (docs/database-access.md#how-the-proxy-logs-in-end-to-end-iam-authentication).',
  );
}

/**
 * Without a proxy the functions log in to the cluster itself with IAM tokens, which it refuses
 * unless IAM database authentication is on. A cluster defined in this app without
 * `iamAuthentication: true` gets a warning at synth (an imported one cannot be inspected; an
 * instance of the app is switched on by the construct's `grantConnect`).
 */
export function warnOnClusterAuth(scope: Construct, cluster: rds.IDatabaseCluster): void {
  const cfn = cluster.node.defaultChild;
  if (!(cfn instanceof rds.CfnDBCluster) || cfn.enableIamDatabaseAuthentication === true) return;
  Annotations.of(scope).addWarningV2(
    'outbox-relay:cluster-iam-auth',
    `The cluster ${cluster.node.path} does not have IAM database authentication on, so it refuses the relay's and ` +
      "the monitor's IAM logins. Set iamAuthentication: true on it (docs/database-access.md#without-a-proxy-iam-straight-to-the-instance-or-cluster).",
  );
}
