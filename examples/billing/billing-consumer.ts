/**
 * CDK wiring of the example consumer: an EventBridge rule matching `source: demo.shop` and
 * `detail-type: OrderPlaced` on the outbox's bus, the billing Lambda as its target with a retry
 * policy (24 hours, 185 attempts: long enough for `wait-for-gap` waits and short outages) and an
 * encrypted SQS dead-letter queue for what never succeeds.
 */
import { fileURLToPath } from 'node:url';
import { Duration } from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventTargets from 'aws-cdk-lib/aws-events-targets';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import type * as rds from 'aws-cdk-lib/aws-rds';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct } from 'constructs';
import { OUTBOX_BUNDLING } from '../../infra/outbox-relay.ts';

const repoRoot = fileURLToPath(new URL('../..', import.meta.url));

export interface BillingConsumerProps {
  readonly bus: events.IEventBus;
  readonly vpc: ec2.IVpc;
  readonly securityGroups: ec2.ISecurityGroup[];
  readonly proxy: rds.IDatabaseProxy;
  readonly databaseName: string;
  /** @default 'billing' */
  readonly databaseUser?: string;
}

export class BillingConsumer extends Construct {
  public readonly function: nodejs.NodejsFunction;
  public readonly deadLetterQueue: sqs.Queue;
  public readonly rule: events.Rule;

  constructor(scope: Construct, id: string, props: BillingConsumerProps) {
    super(scope, id);
    const user = props.databaseUser ?? 'billing';
    this.function = new nodejs.NodejsFunction(this, 'Function', {
      entry: `${repoRoot}examples/billing/handler.ts`,
      projectRoot: repoRoot,
      depsLockFilePath: `${repoRoot}package-lock.json`,
      runtime: lambda.Runtime.NODEJS_24_X,
      architecture: lambda.Architecture.ARM_64,
      timeout: Duration.seconds(30),
      vpc: props.vpc,
      securityGroups: props.securityGroups,
      environment: {
        PGHOST: props.proxy.endpoint,
        PGDATABASE: props.databaseName,
        PGUSER: user,
        OUTBOX_DB_IAM_AUTH: 'true',
      },
      bundling: OUTBOX_BUNDLING,
    });
    props.proxy.grantConnect(this.function, user);
    this.deadLetterQueue = new sqs.Queue(this, 'DeadLetterQueue', {
      encryption: sqs.QueueEncryption.SQS_MANAGED,
      enforceSSL: true,
      retentionPeriod: Duration.days(14),
    });
    this.rule = new events.Rule(this, 'OrderPlacedRule', {
      eventBus: props.bus,
      eventPattern: { source: ['demo.shop'], detailType: ['OrderPlaced'] },
      description: 'OrderPlaced events from the demo shop to billing',
    });
    this.rule.addTarget(
      new eventTargets.LambdaFunction(this.function, {
        retryAttempts: 185,
        maxEventAge: Duration.hours(24),
        deadLetterQueue: this.deadLetterQueue,
      }),
    );
  }
}
