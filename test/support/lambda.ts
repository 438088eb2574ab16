/** A Lambda context for invoking handlers in tests: only the deadline is real. */
import type { Context } from 'aws-lambda';

/** A context whose `getRemainingTimeInMillis()` counts down from `ms` on the real clock. */
export function lambdaContext(ms = 60_000, functionName = 'outbox-test'): Context {
  const deadline = Date.now() + ms;
  return {
    awsRequestId: 'test-request',
    functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:us-east-1:123456789012:function:${functionName}`,
    memoryLimitInMB: '256',
    logGroupName: `/aws/lambda/${functionName}`,
    logStreamName: 'test',
    callbackWaitsForEmptyEventLoop: false,
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: () => {},
    fail: () => {},
    succeed: () => {},
  };
}
