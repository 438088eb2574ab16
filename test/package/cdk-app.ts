// A consumer's CDK app, run in a fresh project that installed the packed tarball (no esbuild, no
// Docker there): OutboxRelay on an imported VPC, security group and RDS Proxy, and a second stack
// with deploy-time migrations. The output folder is the first argument.

import { OutboxRelay } from '@outbox-relay-aws/cdk';
import { App, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as rds from 'aws-cdk-lib/aws-rds';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';

const app = new App({ outdir: process.argv[2] });
const env = { account: '123456789012', region: 'eu-west-1' };

function imported(stack: Stack) {
  const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
    vpcId: 'vpc-0123456789abcdef0',
    availabilityZones: ['eu-west-1a', 'eu-west-1b'],
    privateSubnetIds: ['subnet-0123456789abcdef0', 'subnet-0123456789abcdef1'],
  });
  const securityGroups = [
    ec2.SecurityGroup.fromSecurityGroupId(stack, 'FunctionsSg', 'sg-0123456789abcdef0'),
  ];
  const proxy = rds.DatabaseProxy.fromDatabaseProxyAttributes(stack, 'Proxy', {
    dbProxyArn: 'arn:aws:rds:eu-west-1:123456789012:db-proxy:prx-0123456789abcdef0',
    dbProxyName: 'orders-proxy',
    endpoint: 'orders-proxy.proxy-c0ffee.eu-west-1.rds.amazonaws.com',
    securityGroups: [],
  });
  return { vpc, securityGroups, proxy };
}

const service = new Stack(app, 'ServiceStack', { env });
{
  const { vpc, securityGroups, proxy } = imported(service);
  new OutboxRelay(service, 'Outbox', { vpc, securityGroups, database: { proxy, databaseName: 'orders' } });
}

const migrated = new Stack(app, 'MigratedStack', { env });
{
  const { vpc, securityGroups, proxy } = imported(migrated);
  new OutboxRelay(migrated, 'Outbox', {
    vpc,
    securityGroups,
    database: { proxy, databaseName: 'orders' },
    migration: {
      adminSecret: secretsmanager.Secret.fromSecretCompleteArn(
        migrated,
        'Admin',
        'arn:aws:secretsmanager:eu-west-1:123456789012:secret:orders-admin-AbCdEf',
      ),
      host: 'orders-db.c0ffee.eu-west-1.rds.amazonaws.com',
      securityGroups: [ec2.SecurityGroup.fromSecurityGroupId(migrated, 'MigrateSg', 'sg-0123456789abcdef1')],
    },
  });
}

app.synth();
