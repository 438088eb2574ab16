/**
 * A Lambda event source mapping on an SQS queue, as Lambda runs one: it receives a batch (up to
 * `batchSize` messages, with the queue's visibility timeout), invokes the function with an SQS
 * event, and deletes what succeeded. With `ReportBatchItemFailures` a result
 * `{ batchItemFailures: [{ itemIdentifier }] }` keeps only those messages; an empty list, or a
 * null result, deletes all; a failed invocation, or a result naming an id that is not in the batch,
 * keeps the whole batch ("Handling errors for an SQS event source in Lambda", AWS Lambda Developer
 * Guide). A kept message becomes visible again when its visibility timeout ends, and SQS moves it
 * to the dead-letter queue after `maxReceiveCount` receives — that is the queue's doing (the local
 * SQS endpoint's), not the mapping's.
 *
 * Polled by the caller, one batch at a time ({@link SqsEventSource.poll}); not modelled: the
 * mapping's concurrency scaling and its batching window.
 */
import type { Message, SQSClient } from '@aws-sdk/client-sqs';
import { DeleteMessageBatchCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import type { InvocationOutcome } from './lambda-process.ts';

/** Options of {@link SqsEventSource}. */
export interface SqsEventSourceOptions {
  sqs: SQSClient;
  queueUrl: string;
  queueArn: string;
  region: string;
  batchSize: number;
  reportBatchItemFailures: boolean;
  /** Runs one invocation of the function with the SQS event. */
  invoke: (event: unknown) => Promise<InvocationOutcome>;
}

/** One batch, as it went. */
export interface PolledBatch {
  received: number;
  deleted: number;
  /** Messages left in the queue for a retry (visible again after the visibility timeout). */
  kept: number;
  outcome: InvocationOutcome | undefined;
}

/** The shape of an SQS event record as Lambda builds it from a received message. */
function record(m: Message, queueArn: string, region: string) {
  return {
    messageId: m.MessageId,
    receiptHandle: m.ReceiptHandle,
    body: m.Body,
    attributes: m.Attributes ?? {},
    messageAttributes: Object.fromEntries(
      Object.entries(m.MessageAttributes ?? {}).map(([name, v]) => [
        name,
        { stringValue: v.StringValue, dataType: v.DataType, stringListValues: [], binaryListValues: [] },
      ]),
    ),
    md5OfBody: m.MD5OfBody,
    eventSource: 'aws:sqs',
    eventSourceARN: queueArn,
    awsRegion: region,
  };
}

/** See the module's comment. */
export class SqsEventSource {
  readonly batches: PolledBatch[] = [];
  readonly #o: SqsEventSourceOptions;

  constructor(options: SqsEventSourceOptions) {
    this.#o = options;
  }

  /** Receives one batch (a 1 s long poll) and, when there is one, invokes the function with it. */
  async poll(): Promise<PolledBatch> {
    const { sqs, queueUrl } = this.#o;
    const answer = await sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: queueUrl,
        MaxNumberOfMessages: this.#o.batchSize,
        WaitTimeSeconds: 1,
        MessageSystemAttributeNames: ['All'],
        MessageAttributeNames: ['All'],
      }),
      { abortSignal: AbortSignal.timeout(10_000) },
    );
    const messages = answer.Messages ?? [];
    if (messages.length === 0) return { received: 0, deleted: 0, kept: 0, outcome: undefined };
    const outcome = await this.#o.invoke({
      Records: messages.map((m) => record(m, this.#o.queueArn, this.#o.region)),
    });
    const done = outcome.type === 'result' ? this.#succeeded(messages, outcome.result) : [];
    if (done.length > 0) {
      await sqs.send(
        new DeleteMessageBatchCommand({
          QueueUrl: queueUrl,
          Entries: done.map((m, i) => ({ Id: String(i), ReceiptHandle: m.ReceiptHandle })),
        }),
        { abortSignal: AbortSignal.timeout(10_000) },
      );
    }
    const batch = {
      received: messages.length,
      deleted: done.length,
      kept: messages.length - done.length,
      outcome,
    };
    this.batches.push(batch);
    return batch;
  }

  /** The messages a successful invocation's result lets go (see the module's comment). */
  #succeeded(messages: Message[], result: unknown): Message[] {
    if (!this.#o.reportBatchItemFailures) return messages;
    const failures = (result as { batchItemFailures?: { itemIdentifier?: unknown }[] } | null)
      ?.batchItemFailures;
    if (result === null || result === undefined || failures === undefined || failures.length === 0)
      return messages;
    const ids = new Set(messages.map((m) => m.MessageId));
    if (
      !Array.isArray(failures) ||
      failures.some((f) => typeof f?.itemIdentifier !== 'string' || !ids.has(f.itemIdentifier))
    ) {
      return [];
    }
    const failed = new Set(failures.map((f) => f.itemIdentifier));
    return messages.filter((m) => !failed.has(m.MessageId));
  }
}
