/** The Lambda client of the replay commands (`outbox inbox parked replay`, `outbox inbox failed replay`). */
import { LambdaClient } from '@aws-sdk/client-lambda';

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
