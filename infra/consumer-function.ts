/**
 * The `OutboxConsumer`'s function when it is bundled from the consumer's entry: NodejsFunction with
 * the relay's bundling options, and the check that esbuild is there to bundle it locally.
 */
import { spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import { Duration, Validations } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import { OUTBOX_BUNDLING } from './bundling.ts';
import type { OutboxConsumerProps } from './consumer-props.ts';

/** The function bundled from `entry`: Node 24, Arm, in the VPC, its own log group. */
export function bundledFunction(
  scope: Construct,
  props: OutboxConsumerProps,
  entry: string,
  environment: Readonly<Record<string, string>>,
): nodejs.NodejsFunction {
  const bundling = { ...OUTBOX_BUNDLING, ...props.functionProps?.bundling };
  if (!bundling.forceDockerBundling && !bundling.dockerImage) requireLocalEsbuild();
  const fn = new nodejs.NodejsFunction(scope, 'Function', {
    runtime: lambda.Runtime.NODEJS_24_X,
    architecture: lambda.Architecture.ARM_64,
    memorySize: 256,
    timeout: Duration.seconds(30),
    vpc: props.vpc,
    vpcSubnets: props.vpcSubnets,
    securityGroups: props.securityGroups,
    logGroup: new logs.LogGroup(scope, 'FunctionLogs', {
      retention: props.logRetention ?? logs.RetentionDays.ONE_MONTH,
    }),
    description: `Inbox consumer ${props.consumer}`,
    ...props.functionProps,
    entry,
    bundling,
    environment: { ...environment, ...props.functionProps?.environment },
  });
  // cdk-nag (AwsSolutions), acknowledged with reasons rather than silenced.
  for (const policy of ['AWSLambdaBasicExecutionRole', 'AWSLambdaVPCAccessExecutionRole']) {
    if (!fn.role) break;
    Validations.of(fn.role).acknowledge({
      id: `AwsSolutions::AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/${policy}]`,
      reason: `${policy} is the AWS-maintained minimum for a VPC Lambda: its own log group and its network interfaces`,
    });
  }
  return fn;
}

/**
 * NodejsFunction bundles locally only when it finds esbuild — resolvable from aws-cdk-lib, or
 * `esbuild` on the PATH — and otherwise silently builds in Docker. esbuild is an optional peer of
 * the package (an app with only OutboxRelay, whose bundles are pre-built, need not install its
 * 10 MB): where it is not found, synth fails with the remedy rather than need Docker.
 * @throws Error naming the remedy when esbuild cannot be found
 */
function requireLocalEsbuild(): void {
  try {
    const fromCdk = createRequire(createRequire(import.meta.url).resolve('aws-cdk-lib/package.json'));
    fromCdk.resolve('esbuild/package.json');
    return;
  } catch {
    const probe = spawnSync('esbuild', ['--version']);
    if (probe.status === 0 && !probe.error) return;
  }
  throw new Error(
    'OutboxConsumer: esbuild cannot be found beside aws-cdk-lib or on the PATH, so NodejsFunction would bundle the entry in Docker. Install it in the CDK app (npm i -D esbuild), or pass functionProps.bundling.forceDockerBundling: true to use Docker on purpose.',
  );
}
