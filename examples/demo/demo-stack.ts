/**
 * The demo stack: a complete, working system with defaults — a VPC with private subnets and an
 * EventBridge interface endpoint (no NAT), RDS for PostgreSQL, RDS Proxy with end-to-end IAM
 * authentication and TLS required, a custom event bus, and the OutboxRelay construct with
 * deploy-time migrations. With `databaseAccess: 'direct'` (`cdk deploy -c databaseAccess=direct`)
 * there is no proxy: the functions log in to the instance itself with IAM, over verified TLS.
 */

import { DEFAULT_ROLES, OutboxRelay } from '@outbox-relay-aws/cdk';
import { Duration, RemovalPolicy, Stack, type StackProps, Validations } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as rds from 'aws-cdk-lib/aws-rds';
import type { Construct } from 'constructs';
import { BillingConsumer } from '../billing/billing-consumer.ts';

/** Props of {@link OutboxDemoStack}. */
export interface OutboxDemoStackProps extends StackProps {
  /**
   * Database name.
   * @default 'app'
   */
  readonly databaseName?: string;
  /**
   * Instance class of the database.
   * @default t4g.micro
   */
  readonly instanceType?: ec2.InstanceType;
  /**
   * How the relay, the monitor and the example consumer reach the database: `proxy` through RDS
   * Proxy, `direct` to the instance with IAM authentication (no proxy: about $22 a month less; see
   * docs/database-access.md#without-a-proxy-iam-straight-to-the-instance-or-cluster for the trade-offs).
   * @default 'proxy'
   */
  readonly databaseAccess?: 'proxy' | 'direct';
  /**
   * How the example consumer gets its events: `direct` (the rule invokes its function) or `queue`
   * (the rule sends them to an SQS queue its function reads); see OutboxConsumer's `topology`.
   * @default 'direct'
   */
  readonly consumerTopology?: 'direct' | 'queue';
  /**
   * The bus: `classic` (an EventBridge event bus and a rule) or `custom` (a Custom Event Bus,
   * EventsV2, and a FIFO subscriber; only with `consumerTopology: 'direct'`).
   * @default 'classic'
   */
  readonly bus?: 'classic' | 'custom';
}

/** The complete demo system; `app.ts` beside it synthesises it. */
export class OutboxDemoStack extends Stack {
  public readonly vpc: ec2.Vpc;
  public readonly database: rds.DatabaseInstance;
  /** The proxy; undefined with `databaseAccess: 'direct'`. */
  public readonly proxy: rds.DatabaseProxy | undefined;
  public readonly outbox: OutboxRelay;
  /** The example consumer: a rule on the bus, the billing Lambda with its inbox, and its failure queues. */
  public readonly billing: BillingConsumer;

  constructor(scope: Construct, id: string, props: OutboxDemoStackProps = {}) {
    super(scope, id, props);
    const databaseName = props.databaseName ?? 'app';
    const direct = props.databaseAccess === 'direct';

    this.vpc = new ec2.Vpc(this, 'Vpc', {
      maxAzs: 2,
      natGateways: 0,
      subnetConfiguration: [{ name: 'private', subnetType: ec2.SubnetType.PRIVATE_ISOLATED, cidrMask: 24 }],
      flowLogs: {
        all: {
          destination: ec2.FlowLogDestination.toCloudWatchLogs(
            new logs.LogGroup(this, 'FlowLogs', {
              retention: logs.RetentionDays.ONE_MONTH,
              removalPolicy: RemovalPolicy.DESTROY,
            }),
          ),
          trafficType: ec2.FlowLogTrafficType.REJECT,
        },
      },
    });
    // One security group per kind of client, so each reaches only what it uses: the relay and the
    // monitor the proxy (and EventBridge), the migrate function the instance itself (and Secrets
    // Manager). Nothing but the proxy and the migrate function reaches the instance. Without a
    // proxy, the relay, the monitor and the consumer reach the instance instead.
    const functionsSg = new ec2.SecurityGroup(this, 'FunctionsSg', {
      vpc: this.vpc,
      description: 'Outbox relay and monitor functions',
      allowAllOutbound: false,
    });
    const migrateSg = new ec2.SecurityGroup(this, 'MigrateSg', {
      vpc: this.vpc,
      description: 'Outbox migrate function (deploy time)',
      allowAllOutbound: false,
    });
    // The relay reaches EventBridge, the migrate function Secrets Manager, without a NAT gateway.
    const eventBridgeEndpointSg = new ec2.SecurityGroup(this, 'EndpointSg', {
      vpc: this.vpc,
      description: 'EventBridge interface endpoint',
      allowAllOutbound: false,
    });
    eventBridgeEndpointSg.addIngressRule(functionsSg, ec2.Port.tcp(443), 'HTTPS from the relay');
    functionsSg.addEgressRule(eventBridgeEndpointSg, ec2.Port.tcp(443), 'HTTPS to the EventBridge endpoint');
    const secretsEndpointSg = new ec2.SecurityGroup(this, 'SecretsEndpointSg', {
      vpc: this.vpc,
      description: 'Secrets Manager interface endpoint',
      allowAllOutbound: false,
    });
    secretsEndpointSg.addIngressRule(migrateSg, ec2.Port.tcp(443), 'HTTPS from the migrate function');
    migrateSg.addEgressRule(secretsEndpointSg, ec2.Port.tcp(443), 'HTTPS to the Secrets Manager endpoint');
    const custom = props.bus === 'custom';
    this.vpc.addInterfaceEndpoint('EventBridgeEndpoint', {
      // The Custom Event Bus has an endpoint service of its own (EventBridge User Guide, "Names,
      // endpoints, and IAM permissions for the Custom Event Bus").
      service: custom
        ? new ec2.InterfaceVpcEndpointAwsService('eventsv2')
        : ec2.InterfaceVpcEndpointAwsService.EVENTBRIDGE,
      securityGroups: [eventBridgeEndpointSg],
      open: false,
    });
    const secretsEndpoint = this.vpc.addInterfaceEndpoint('SecretsManagerEndpoint', {
      service: ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER,
      securityGroups: [secretsEndpointSg],
      open: false,
    });

    const dbSg = new ec2.SecurityGroup(this, 'DatabaseSg', {
      vpc: this.vpc,
      description: 'Outbox database',
      allowAllOutbound: false,
    });
    // Where the relay, the monitor and the consumer connect: the proxy, or the instance itself.
    const proxySg = direct
      ? undefined
      : new ec2.SecurityGroup(this, 'ProxySg', {
          vpc: this.vpc,
          description: 'RDS Proxy',
          allowAllOutbound: false,
        });
    const entrySg = proxySg ?? dbSg;
    const entryName = proxySg ? 'RDS Proxy' : 'the database';
    // The proxy-to-instance rules (both directions) come from addProxy below; declaring them here as
    // well would make two identical rules, and removing one later deletes the shared rule.
    entrySg.addIngressRule(functionsSg, ec2.Port.tcp(5432), 'Postgres from the relay and the monitor');
    functionsSg.addEgressRule(entrySg, ec2.Port.tcp(5432), `Postgres to ${entryName}`);
    // The example consumer reaches only the proxy, or the instance (Lambda itself delivers to its
    // failure queue).
    const consumerSg = new ec2.SecurityGroup(this, 'ConsumerSg', {
      vpc: this.vpc,
      description: 'Example billing consumer',
      allowAllOutbound: false,
    });
    entrySg.addIngressRule(consumerSg, ec2.Port.tcp(5432), 'Postgres from the example consumer');
    consumerSg.addEgressRule(entrySg, ec2.Port.tcp(5432), `Postgres to ${entryName}`);
    dbSg.addIngressRule(migrateSg, ec2.Port.tcp(5432), 'Postgres from the migrate function');
    migrateSg.addEgressRule(dbSg, ec2.Port.tcp(5432), 'Postgres to the database (migrations)');

    this.database = new rds.DatabaseInstance(this, 'Database', {
      // A full version: cfn-lint's RDS data lists the bare major "17" as one that new instances
      // cannot be created with. Minor upgrades still apply (autoMinorVersionUpgrade defaults to on).
      engine: rds.DatabaseInstanceEngine.postgres({ version: rds.PostgresEngineVersion.VER_17_9 }),
      instanceType: props.instanceType ?? ec2.InstanceType.of(ec2.InstanceClass.T4G, ec2.InstanceSize.MICRO),
      vpc: this.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
      securityGroups: [dbSg],
      databaseName,
      credentials: rds.Credentials.fromGeneratedSecret('outbox_admin'),
      storageEncrypted: true,
      iamAuthentication: true,
      multiAz: false,
      allocatedStorage: 20,
      backupRetention: Duration.days(7),
      deletionProtection: false,
      removalPolicy: RemovalPolicy.SNAPSHOT,
      cloudwatchLogsExports: ['postgresql'],
      cloudwatchLogsRetention: logs.RetentionDays.ONE_MONTH,
      enablePerformanceInsights: false,
    });

    const ack = (scope: Construct, id: string, reason: string) =>
      Validations.of(scope).acknowledge({ id: `AwsSolutions::${id}`, reason });
    ack(
      this.database,
      'AwsSolutions-RDS3',
      'Demo stack: a single-AZ instance keeps the cost down; set multiAz for production',
    );
    ack(
      this.database,
      'AwsSolutions-RDS10',
      'Demo stack: `cdk destroy` must be able to remove it (a final snapshot is kept: RemovalPolicy.SNAPSHOT)',
    );
    ack(
      this.database,
      'AwsSolutions-RDS11',
      'Reachable only from two security groups in isolated subnets; a non-standard port adds no protection',
    );
    ack(
      this.database,
      'AwsSolutions-SMG4',
      'Admin secret used only by the deploy-time migrate function; the proxy and its clients use IAM tokens. Add rotation for production',
    );
    for (const child of this.node.children) {
      if (child.node.id.startsWith('LogRetention')) {
        ack(
          child,
          'AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/AWSLambdaBasicExecutionRole]',
          'CDK-managed function that sets the database log group retention',
        );
        ack(
          child,
          'AwsSolutions-IAM5[Resource::*]',
          'CDK-managed log retention function: the log group is created by RDS, so its ARN is not known to the template',
        );
      }
    }

    // End-to-end IAM authentication: a client signs a token for the proxy, and the proxy signs its
    // own token for the instance as that same user. No user needs a Secrets Manager secret, and the
    // proxy cannot log in as the admin: its role may connect as the deployment's roles only (granted
    // below, once the construct has said which users the relay and the monitor are).
    const proxyRole = direct
      ? undefined
      : new iam.Role(this, 'ProxyRole', {
          assumedBy: new iam.ServicePrincipal('rds.amazonaws.com'),
          description: 'RDS Proxy: log in to the outbox database with IAM as the outbox roles',
        });
    this.proxy =
      proxyRole &&
      this.database.addProxy('Proxy', {
        defaultAuthScheme: rds.DefaultAuthScheme.IAM_AUTH,
        role: proxyRole,
        vpc: this.vpc,
        vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
        securityGroups: [proxySg as ec2.SecurityGroup],
        requireTLS: true,
      });
    const target = this.proxy ? { proxy: this.proxy } : { instance: this.database };

    this.outbox = new OutboxRelay(this, 'Outbox', {
      vpc: this.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
      securityGroups: [functionsSg],
      database: { ...target, databaseName },
      // What the demo's producer enqueues under (examples/billing/events.ts): only the relay may
      // put events of this source on the bus.
      sources: ['demo.shop'],
      ...(custom ? { customEventBus: {} } : {}),
      migration: {
        adminSecret: this.database.secret as NonNullable<typeof this.database.secret>,
        host: this.database.dbInstanceEndpointAddress,
        securityGroups: [migrateSg],
        // Everything the migrate function uses (the instance, the Secrets Manager endpoint and the
        // security group rules to both) and, as the functions are ordered after the migrations,
        // what they use: the proxy, its role's policy, their security group rules.
        executeAfter: [
          this.database,
          ...(this.proxy && proxyRole && proxySg ? [this.proxy, proxyRole, proxySg] : []),
          secretsEndpoint,
          dbSg,
          migrateSg,
          secretsEndpointSg,
          functionsSg,
          eventBridgeEndpointSg,
        ],
      },
    });
    // The producer and consumer roles are created by the same migration for the application's own
    // services, which reach the database through this proxy too.
    if (proxyRole) {
      const { relay, monitor } = this.outbox.databaseUsers;
      for (const user of new Set([relay, monitor, DEFAULT_ROLES.producer, DEFAULT_ROLES.consumer])) {
        this.database.grantConnect(proxyRole, user);
      }
    }

    this.billing = new BillingConsumer(this, 'Billing', {
      ...(custom ? { customEventBusArn: this.outbox.customEventBusArn } : { bus: this.outbox.eventBus }),
      vpc: this.vpc,
      vpcSubnets: { subnetType: ec2.SubnetType.PRIVATE_ISOLATED },
      securityGroups: [consumerSg],
      ...target,
      databaseName,
      alarmTopic: this.outbox.alarmTopic,
      topology: props.consumerTopology ?? 'direct',
    });
    // Its table is created by its own migration; the relay's migrations come first.
    this.billing.function.node.addDependency(this.outbox);
  }
}
