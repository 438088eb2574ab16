/**
 * Lambda's asynchronous invocation, as it handles a function that fails: the first attempt, then
 * `maximumRetryAttempts` retries (Lambda waits about 1 minute before the first retry and 2 before
 * the second), and after the last failure an invocation record sent to the on-failure destination —
 * here an SQS queue, through the real SQS client ("How Lambda handles errors and retries with
 * asynchronous invocation" and "Capturing records of Lambda asynchronous invocations", AWS Lambda
 * Developer Guide). The waits are multiplied by `delayScale`, so a rehearsal need not wait minutes.
 *
 * Not modelled: Lambda's internal queue and its throttling retries (up to 6 hours), the event age
 * limit between retries, and Lambda's at-least-once delivery of one event twice.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { InvocationOutcome } from './lambda-process.ts';

/** Lambda's waits before the first and the second retry, ms. */
export const LAMBDA_ASYNC_RETRY_DELAYS_MS = [60_000, 120_000] as const;

/** Options of {@link invokeAsynchronously}. */
export interface AsyncInvocationOptions {
  /** Runs one attempt (the function's process, with its timeout). */
  attempt: (event: unknown) => Promise<InvocationOutcome>;
  /** 0–2, the function's `MaximumRetryAttempts`. */
  maximumRetryAttempts: number;
  /** The waits before the retries are multiplied by this (1 = Lambda's). */
  delayScale: number;
  /** The function's ARN, as the record names it. */
  functionArn: string;
  /** The on-failure destination queue and a client to reach it; no record without one. */
  onFailure?: { sqs: SQSClient; queueUrl: string };
  /** Called before each retry's wait: the retry's number (1, 2) and the wait, ms. */
  onRetry?: (retry: number, waitMs: number, failed: InvocationOutcome) => void;
  /** Aborting it ends the waits between attempts: the invocation ends with the attempts made, no record. */
  signal?: AbortSignal;
}

/** What became of an asynchronous invocation. */
export interface AsyncInvocationResult {
  /** Every attempt's outcome, in order. */
  attempts: InvocationOutcome[];
  /** The invocation record sent to the on-failure destination, when every attempt failed. */
  record: Record<string, unknown> | undefined;
}

/**
 * Invokes as Lambda does an asynchronous invocation (see the module's comment).
 * @throws the SQS client's error when the record cannot be sent
 */
export async function invokeAsynchronously(
  event: unknown,
  o: AsyncInvocationOptions,
): Promise<AsyncInvocationResult> {
  const attempts: InvocationOutcome[] = [];
  for (let n = 0; n <= o.maximumRetryAttempts; n++) {
    if (n > 0) {
      const waitMs = (LAMBDA_ASYNC_RETRY_DELAYS_MS[n - 1] ?? 120_000) * o.delayScale;
      o.onRetry?.(n, waitMs, attempts.at(-1) as InvocationOutcome);
      const waited = await sleep(waitMs, true, { signal: o.signal }).catch(() => false);
      if (!waited) return { attempts, record: undefined };
    }
    const outcome = await o.attempt(event);
    attempts.push(outcome);
    if (outcome.type === 'result') return { attempts, record: undefined };
  }
  const last = attempts.at(-1) as InvocationOutcome;
  // The child reports the error's stack: its first line is `Name: message`.
  const [errorType, ...message] = (String(last.error ?? '').split('\n')[0] ?? '').split(': ');
  // The record's shape, as the Lambda Developer Guide gives it.
  const record = {
    version: '1.0',
    timestamp: new Date().toISOString(),
    requestContext: {
      requestId: crypto.randomUUID(),
      functionArn: `${o.functionArn}:$LATEST`,
      condition: 'RetriesExhausted',
      approximateInvokeCount: attempts.length,
    },
    requestPayload: event,
    responseContext: { statusCode: 200, executedVersion: '$LATEST', functionError: 'Unhandled' },
    responsePayload:
      last.type === 'timeout'
        ? { errorMessage: `Task timed out after ${(last.durationMs / 1000).toFixed(2)} seconds` }
        : {
            errorType: message.length > 0 ? errorType : 'Error',
            errorMessage: message.join(': ') || errorType,
          },
  };
  if (o.onFailure) {
    await o.onFailure.sqs.send(
      new SendMessageCommand({ QueueUrl: o.onFailure.queueUrl, MessageBody: JSON.stringify(record) }),
    );
  }
  return { attempts, record };
}
