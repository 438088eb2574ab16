/**
 * The SQS side of `outbox inbox queue list|replay`: reading every message of a consumer's failure
 * queues (hidden meanwhile by their visibility timeout), deleting the replayed ones, and making the
 * rest visible again. The official client (`@aws-sdk/client-sqs`): region, credentials and endpoint
 * (`AWS_ENDPOINT_URL_SQS`) come from the SDK's own settings, and its standard retries (3 attempts)
 * cover a throttled or failed call: receiving, deleting and releasing can each be repeated safely.
 */
import {
  ChangeMessageVisibilityBatchCommand,
  DeleteMessageBatchCommand,
  type Message,
  ReceiveMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { OutboxError } from '../../platform/errors.ts';
import type { QueueMessage } from './failure-queue-messages.ts';

/** Longest wait for one SQS call (a receive long-polls for 1 s of it), ms. */
export const SQS_CALL_TIMEOUT_MS = 20_000;
/** SQS's limit on messages per ReceiveMessage and entries per batch call ("Amazon SQS quotas"). */
const SQS_BATCH = 10;

/** Options of {@link receiveAll}. */
export interface ReceiveOptions {
  /** Stop after this many messages in all (the rest stay in their queue, untouched). */
  max: number;
  /**
   * Seconds the received messages stay hidden from any other reader: longer than the replay takes
   * (the messages left are released at its end). 0–43,200 (SQS's range).
   */
  visibilityTimeout: number;
}

/**
 * Receives the messages of each queue in turn until a receive (a 1 s long poll, which asks every
 * SQS server, unlike a short poll) finds none or nothing new, or `max` in all. Each stays hidden for
 * `visibilityTimeout` seconds: a caller that does not delete it must {@link release} it. A message
 * received again (its visibility timeout ran out while the queues were read) is kept once, with its
 * latest receipt handle, the only one that deletes it.
 * @returns the messages, each queue's in the order received
 * @throws {QueueReadError} naming the queue, after the SDK's retries (`QueueDoesNotExist`, an access
 *   error…); the messages read before it are made visible again first
 */
export async function receiveAll(
  client: SQSClient,
  queueUrls: readonly string[],
  o: ReceiveOptions,
): Promise<QueueMessage[]> {
  const received: QueueMessage[] = [];
  let queueUrl = '';
  try {
    for (queueUrl of queueUrls) {
      const seen = new Map<string, QueueMessage>();
      while (received.length < o.max) {
        const answer = await client.send(
          new ReceiveMessageCommand({
            QueueUrl: queueUrl,
            MaxNumberOfMessages: Math.min(SQS_BATCH, o.max - received.length),
            VisibilityTimeout: o.visibilityTimeout,
            WaitTimeSeconds: 1,
            MessageSystemAttributeNames: ['ApproximateReceiveCount', 'SentTimestamp'],
            MessageAttributeNames: ['All'],
          }),
          { abortSignal: AbortSignal.timeout(SQS_CALL_TIMEOUT_MS) },
        );
        let fresh = 0;
        for (const m of answer.Messages ?? []) {
          const read = queueMessage(queueUrl, m);
          const earlier = seen.get(read.messageId);
          if (earlier) {
            earlier.receiptHandle = read.receiptHandle;
            earlier.receiveCount = read.receiveCount;
            continue;
          }
          seen.set(read.messageId, read);
          received.push(read);
          fresh++;
        }
        // None, or only messages already read: the queue has come round.
        if (fresh === 0) break;
      }
    }
  } catch (error) {
    await release(client, received).catch(() => {});
    throw new QueueReadError(queueUrl, error);
  }
  return received;
}

/** A failure queue could not be read; nothing read from the queues is kept hidden. */
export class QueueReadError extends OutboxError {
  override name = 'QueueReadError';
  readonly queueUrl: string;
  constructor(queueUrl: string, cause: unknown) {
    const e = cause as Error;
    super(
      `could not read the queue ${queueUrl}: ${e?.name ?? 'Error'}: ${e?.message ?? String(cause)} ` +
        '(nothing was invoked or deleted, and the messages read from the queues were made visible again)',
      { cause },
    );
    this.queueUrl = queueUrl;
  }
}

function queueMessage(queueUrl: string, m: Message): QueueMessage {
  const attributes: Record<string, string> = {};
  for (const [name, value] of Object.entries(m.MessageAttributes ?? {})) {
    if (value.StringValue !== undefined) attributes[name] = value.StringValue;
  }
  const sent = Number(m.Attributes?.SentTimestamp);
  return {
    queueUrl,
    messageId: m.MessageId ?? '',
    receiptHandle: m.ReceiptHandle ?? '',
    body: m.Body ?? '',
    attributes,
    receiveCount: Number(m.Attributes?.ApproximateReceiveCount ?? 1),
    sentAt: Number.isFinite(sent) && sent > 0 ? new Date(sent) : undefined,
  };
}

/** The messages of one queue, in batches of SQS's limit. */
function* batches(messages: readonly QueueMessage[]): Generator<[string, QueueMessage[]]> {
  const byQueue = Map.groupBy(messages, (m) => m.queueUrl);
  for (const [queueUrl, all] of byQueue) {
    for (let i = 0; i < all.length; i += SQS_BATCH) yield [queueUrl, all.slice(i, i + SQS_BATCH)];
  }
}

/**
 * Deletes messages (DeleteMessageBatch).
 * @returns the ids of the messages that could not be deleted, with SQS's reason (an expired receipt
 *   handle: the visibility timeout ran out and the message was received again elsewhere)
 */
export async function deleteMessages(
  client: SQSClient,
  messages: readonly QueueMessage[],
): Promise<{ messageId: string; reason: string }[]> {
  const failed: { messageId: string; reason: string }[] = [];
  for (const [queueUrl, batch] of batches(messages)) {
    const answer = await client.send(
      new DeleteMessageBatchCommand({
        QueueUrl: queueUrl,
        Entries: batch.map((m, i) => ({ Id: String(i), ReceiptHandle: m.receiptHandle })),
      }),
      { abortSignal: AbortSignal.timeout(SQS_CALL_TIMEOUT_MS) },
    );
    for (const f of answer.Failed ?? []) {
      const m = batch[Number(f.Id)];
      if (m) failed.push({ messageId: m.messageId, reason: `${f.Code ?? 'failed'}: ${f.Message ?? ''}` });
    }
  }
  return failed;
}

/**
 * Makes messages visible again at once (visibility timeout 0), for the next reader or the next
 * replay. A message whose handle expired is visible already: its entry's failure is ignored.
 */
export async function release(client: SQSClient, messages: readonly QueueMessage[]): Promise<void> {
  for (const [queueUrl, batch] of batches(messages)) {
    await client.send(
      new ChangeMessageVisibilityBatchCommand({
        QueueUrl: queueUrl,
        Entries: batch.map((m, i) => ({
          Id: String(i),
          ReceiptHandle: m.receiptHandle,
          VisibilityTimeout: 0,
        })),
      }),
      { abortSignal: AbortSignal.timeout(SQS_CALL_TIMEOUT_MS) },
    );
  }
}

/** Runs `fn` with an SQS client, and closes it. */
export async function withSqs<T>(fn: (client: SQSClient) => Promise<T>): Promise<T> {
  const client = new SQSClient({});
  try {
    return await fn(client);
  } finally {
    client.destroy();
  }
}
