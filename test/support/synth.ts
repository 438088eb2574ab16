/**
 * The common set-up of the synth tests (test/infra, test/observe): an App whose cloud assembly
 * goes to a temporary folder, a stack with an imported VPC, security group and RDS proxy, an
 * OutboxRelay on that proxy, and a consumer's props on the relay's bus. Nothing is deployed and
 * nothing synthesises until a test calls `Template.fromStack` or `app.synth()`.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App, type AppProps, Stack } from 'aws-cdk-lib';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as rds from 'aws-cdk-lib/aws-rds';
import { afterAll } from 'vitest';
import { OrderPlaced } from '../../examples/billing/events.ts';
import { OutboxRelay } from '../../infra/outbox-relay.ts';
import type { OutboxRelayProps } from '../../infra/props.ts';

/** App context that skips bundling in every stack: for tests that do not look at a function's code. */
export const NO_BUNDLING = { 'aws:cdk:bundling-stacks': [] as string[] };

/**
 * Registers the removal, after the file's tests, of a temporary folder named `prefix…`, and returns
 * a factory of Apps that each write their cloud assembly to a fresh folder in it. `defaults` are
 * the App's props (e.g. `{ context: NO_BUNDLING }`); the factory's own props are spread over them.
 */
export function useApps(prefix: string, defaults: AppProps = {}): (props?: AppProps) => App {
  const root = mkdtempSync(join(tmpdir(), prefix));
  afterAll(() => rmSync(root, { recursive: true, force: true }));
  return (props = {}) => new App({ outdir: mkdtempSync(join(root, 'cdk.out-')), ...defaults, ...props });
}

/**
 * The names a test stack imports its network under. Two sets are in use, kept as the tests were
 * written so that their templates stay the same: `SHOP` (the consumer tests) and `ORDERS` (the
 * Custom Event Bus and retention tests).
 */
export interface Site {
  stackId: string;
  vpcId: string;
  subnetId: string;
  /** The proxy endpoint's first labels, before `.eu-west-1.rds.amazonaws.com`. */
  proxyHost: string;
  databaseName: string;
}
export const SHOP: Site = {
  stackId: 'Shop',
  vpcId: 'vpc-12345678',
  subnetId: 'subnet-11111111',
  proxyHost: 'p.proxy',
  databaseName: 'shop',
};
export const ORDERS: Site = {
  stackId: 'Orders',
  vpcId: 'vpc-1',
  subnetId: 'subnet-1',
  proxyHost: 'p.proxy-1',
  databaseName: 'orders',
};

/**
 * A stack `site.stackId` in `app` (account 123456789012, eu-west-1) with an imported VPC (`Vpc`,
 * one private subnet in eu-west-1a), security group (`Sg`) and RDS proxy (`Proxy`), and an
 * OutboxRelay `Outbox` on the proxy's `site.databaseName`; `relayProps` (or what they return for
 * the stack) are spread last. Returns those, and `base`: a consumer `billing` of OrderPlaced on
 * the relay's bus (its classic `eventBus`, or `customEventBusArn` for a Custom Event Bus) in the
 * same VPC, security group, proxy and database, to spread into OutboxConsumer's props.
 */
export function relayStack(
  app: App,
  site: Site = SHOP,
  relayProps: Partial<OutboxRelayProps> | ((stack: Stack) => Partial<OutboxRelayProps>) = {},
) {
  const stack = new Stack(app, site.stackId, { env: { account: '123456789012', region: 'eu-west-1' } });
  const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
    vpcId: site.vpcId,
    availabilityZones: ['eu-west-1a'],
    privateSubnetIds: [site.subnetId],
  });
  const sg = ec2.SecurityGroup.fromSecurityGroupId(stack, 'Sg', 'sg-12345678');
  const proxy = rds.DatabaseProxy.fromDatabaseProxyAttributes(stack, 'Proxy', {
    dbProxyName: 'p',
    dbProxyArn: 'arn:aws:rds:eu-west-1:123456789012:db-proxy:prx-1',
    endpoint: `${site.proxyHost}.eu-west-1.rds.amazonaws.com`,
    securityGroups: [],
  });
  const relay = new OutboxRelay(stack, 'Outbox', {
    vpc,
    securityGroups: [sg],
    database: { proxy, databaseName: site.databaseName },
    ...(typeof relayProps === 'function' ? relayProps(stack) : relayProps),
  });
  const base = {
    consumer: 'billing',
    // A relay on a Custom Event Bus has no classic bus to give.
    ...(relay.busKind === 'custom'
      ? { customEventBusArn: relay.customEventBusArn }
      : { eventBus: relay.eventBus }),
    events: [OrderPlaced],
    vpc,
    securityGroups: [sg],
    proxy,
    databaseName: site.databaseName,
  };
  return { stack, vpc, sg, proxy, relay, base };
}

/**
 * A Node.js 24 function `id` in `stack` with an inline no-op handler (nothing to bundle), for a
 * consumer's `existingFunction`; `props` (e.g. its timeout) are spread over that.
 */
export function inlineFunction(
  stack: Stack,
  id: string,
  props: Partial<lambda.FunctionProps> = {},
): lambda.Function {
  return new lambda.Function(stack, id, {
    runtime: lambda.Runtime.NODEJS_24_X,
    handler: 'index.handler',
    code: lambda.Code.fromInline('export const handler = async () => {}'),
    ...props,
  });
}
