// A service's CDK app with its inbox consumers, run in a fresh project that installed the packed
// tarballs and esbuild (never Docker): one stack with OutboxRelay on an imported VPC, security
// group and RDS Proxy, and two OutboxConsumers on its bus subscribing to typed events, one per
// topology, their handlers bundled from consumer-handler.ts and consumer-queue-handler.ts. The
// output folder is the first argument.

import { fileURLToPath } from 'node:url';
import { OutboxConsumer, OutboxRelay } from '@outbox-relay-aws/cdk';
import { App, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as rds from 'aws-cdk-lib/aws-rds';
import { OrderPlaced, OrderShipped } from './consumer-events.ts';

const app = new App({ outdir: process.argv[2] });
const stack = new Stack(app, 'ConsumersStack', { env: { account: '123456789012', region: 'eu-west-1' } });

const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
  vpcId: 'vpc-0123456789abcdef0',
  availabilityZones: ['eu-west-1a', 'eu-west-1b'],
  privateSubnetIds: ['subnet-0123456789abcdef0', 'subnet-0123456789abcdef1'],
});
const securityGroups = [ec2.SecurityGroup.fromSecurityGroupId(stack, 'FunctionsSg', 'sg-0123456789abcdef0')];
const proxy = rds.DatabaseProxy.fromDatabaseProxyAttributes(stack, 'Proxy', {
  dbProxyArn: 'arn:aws:rds:eu-west-1:123456789012:db-proxy:prx-0123456789abcdef0',
  dbProxyName: 'orders-proxy',
  endpoint: 'orders-proxy.proxy-c0ffee.eu-west-1.rds.amazonaws.com',
  securityGroups: [],
});
const relay = new OutboxRelay(stack, 'Outbox', {
  vpc,
  securityGroups,
  database: { proxy, databaseName: 'orders' },
});

new OutboxConsumer(stack, 'Billing', {
  consumer: 'billing',
  eventBus: relay.eventBus,
  events: [OrderPlaced],
  entry: fileURLToPath(new URL('./consumer-handler.ts', import.meta.url)),
  vpc,
  securityGroups,
  proxy,
  databaseName: 'orders',
  alarmTopic: relay.alarmTopic,
  dashboard: relay.dashboard,
});

new OutboxConsumer(stack, 'Notifications', {
  consumer: 'notifications',
  topology: 'queue',
  eventBus: relay.eventBus,
  events: [OrderShipped],
  entry: fileURLToPath(new URL('./consumer-queue-handler.ts', import.meta.url)),
  vpc,
  securityGroups,
  proxy,
  databaseName: 'orders',
  alarmTopic: relay.alarmTopic,
  dashboard: relay.dashboard,
});

app.synth();
