/** How the construct makes each of its functions, and how a scheduled invocation is retried. */
import { Duration } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';
import * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';
import { HANDLER_ENTRIES, type HandlerName, OUTBOX_BUNDLING, prebuiltBundle, repoRoot } from './bundling.ts';
import type { OutboxRelayProps } from './props.ts';

/**
 * EventBridge Scheduler invokes asynchronously. Lambda's defaults would retry a failed invocation
 * twice and keep a throttled one for up to 6 hours; the next schedule is a minute away, so a
 * failed or late invocation is dropped instead (60 s is the shortest age Lambda accepts). A
 * failure still counts in the Errors metric that the error alarms watch.
 */
export const SCHEDULED_INVOKE = { retryAttempts: 0, maxEventAge: Duration.minutes(1) } as const;

/** Makes one of the project's functions: Arm, Node 24, in the VPC, with a log group of its own. */
export type FunctionFactory = (
  name: string,
  handler: HandlerName,
  extra: lambda.FunctionOptions,
  bundling?: nodejs.BundlingOptions,
) => lambda.Function;

/**
 * The {@link FunctionFactory} of a construct: a Function on the package's pre-built bundle when
 * there is one (the installed package), else a NodejsFunction bundled from source (a checkout).
 */
export function functionFactory(scope: Construct, props: OutboxRelayProps): FunctionFactory {
  const logRetention = props.logRetention ?? logs.RetentionDays.ONE_MONTH;
  return (name, handler, extra, bundling = OUTBOX_BUNDLING) => {
    const options: lambda.FunctionOptions = {
      architecture: lambda.Architecture.ARM_64,
      memorySize: 256,
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets,
      securityGroups: props.securityGroups,
      logGroup: new logs.LogGroup(scope, `${name}Logs`, { retention: logRetention }),
      ...extra,
    };
    const runtime = lambda.Runtime.NODEJS_24_X;
    const bundle = prebuiltBundle(handler);
    if (bundle) {
      return new lambda.Function(scope, name, {
        ...options,
        runtime,
        code: lambda.Code.fromAsset(bundle),
        handler: 'index.handler',
      });
    }
    return new nodejs.NodejsFunction(scope, name, {
      ...options,
      runtime,
      entry: `${repoRoot}${HANDLER_ENTRIES[handler]}`,
      projectRoot: repoRoot,
      depsLockFilePath: `${repoRoot}package-lock.json`,
      bundling,
    });
  };
}
