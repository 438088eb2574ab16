/**
 * The Lambda side of the replay commands (`outbox inbox parked replay`, `outbox inbox failed
 * replay`): the client, the options both give for invoking the consumer's function, and the check
 * that it is the consumer's.
 */
import { LambdaClient } from '@aws-sdk/client-lambda';
import type { Command } from 'commander';
import { EnvVar } from '../../platform/index.ts';
import { checkConsumerFunction } from './consumer-function.ts';
import { positiveInteger } from './parsers.ts';

/** Longest wait for the function's configuration (the check before a replay), ms. */
const FUNCTION_CHECK_TIMEOUT_MS = 30_000;

/** The options of invoking the consumer's function: `--timeout` (seconds) and `--skip-function-check`. */
export interface InvokeOptions {
  timeout: number;
  skipFunctionCheck?: boolean;
}

/** Adds `--timeout` and `--skip-function-check` to a replay command. */
export function addInvokeOptions(command: Command): Command {
  return command
    .option(
      '--timeout <seconds>',
      'longest wait for one invocation (above the function timeout)',
      positiveInteger,
      900,
    )
    .option(
      '--skip-function-check',
      `do not check that --function-name is the consumer's function (its environment names the consumer in ${EnvVar.inboxConsumer}); for a function that does not set it`,
    );
}

/**
 * Before anything is marked or invoked: refuses a function that is not the consumer's (another
 * consumer's function would apply the events as its own), unless `--skip-function-check`.
 * @throws ConsumerFunctionError (consumer-function.ts) when its environment does not name the consumer
 */
export async function checkFunctionUnlessSkipped(
  client: LambdaClient,
  functionName: string,
  consumer: string,
  o: InvokeOptions,
): Promise<void> {
  if (o.skipFunctionCheck) return;
  await checkConsumerFunction(client, functionName, consumer, {
    abortSignal: AbortSignal.timeout(FUNCTION_CHECK_TIMEOUT_MS),
  });
}

/**
 * Runs `fn` with a Lambda client when there is a function to call (none otherwise), and closes it.
 * Region, credentials and endpoint (AWS_ENDPOINT_URL_LAMBDA) come from the SDK's own settings.
 * No retries of its own: a retried invocation would apply nothing twice (the inbox), but a timeout
 * must say so rather than run the event again unseen.
 */
export async function withLambda(
  functionName: string | undefined,
  fn: (client: LambdaClient | undefined) => Promise<void>,
): Promise<void> {
  const client = functionName ? new LambdaClient({ maxAttempts: 1 }) : undefined;
  try {
    await fn(client);
  } finally {
    client?.destroy();
  }
}
