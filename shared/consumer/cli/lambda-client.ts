/**
 * The Lambda side of the replay commands (`outbox inbox parked replay`, `outbox inbox failed
 * replay`, `outbox inbox queue replay`): the client, the options they give for invoking the
 * consumer's function, the check that it is the consumer's, and the synchronous invocation.
 */
import { InvokeCommand, LambdaClient } from '@aws-sdk/client-lambda';
import type { Command } from 'commander';
import { positiveInteger } from '../../platform/cli/parsers.ts';
import { EnvVar } from '../../platform/names.ts';
import { checkConsumerFunction } from './consumer-function.ts';

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

/** What a synchronous invocation answered. */
export interface InvokeAnswer {
  /** Lambda's `FunctionError` (`Unhandled`, `Handled`) when the function failed; undefined on success. */
  functionError: string | undefined;
  /** The response payload as text: the handler's result, or the error's JSON. */
  payload: string;
}

/**
 * Invokes the function with one event and waits for its answer (RequestResponse): what the replay
 * commands do with each event, so that each result is seen before the next is sent.
 * @param timeoutSeconds longest wait for the answer (`--timeout`)
 * @throws the SDK's error when no answer came in time or the call failed (the invocation may or
 *   may not have run)
 */
export async function invokeWithEvent(
  client: LambdaClient,
  functionName: string,
  event: unknown,
  timeoutSeconds: number,
): Promise<InvokeAnswer> {
  const answer = await client.send(
    new InvokeCommand({
      FunctionName: functionName,
      InvocationType: 'RequestResponse',
      Payload: Buffer.from(JSON.stringify(event)),
    }),
    { abortSignal: AbortSignal.timeout(timeoutSeconds * 1000) },
  );
  return {
    functionError: answer.FunctionError,
    payload: answer.Payload ? Buffer.from(answer.Payload).toString('utf8') : '',
  };
}
