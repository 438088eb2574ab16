/**
 * The SQS side of `outbox inbox queue list|replay` (failure-queue-client.ts) against the local SQS
 * endpoint, and the pure reading of its messages (failure-queue-messages.ts): the edges an operator
 * can run into — a queue URL that names no queue after others were read, a visibility timeout that
 * runs out while the queues are read, sequences past 2^53.
 */
import { SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { receiveAll } from '../../../shared/consumer/cli/failure-queue-client.ts';
import {
  type QueueMessage,
  readQueueMessage,
  replayOrder,
} from '../../../shared/consumer/cli/failure-queue-messages.ts';
import { type LocalSqs, startLocalSqs } from '../../../shared/local/sqs.ts';

let endpoint: LocalSqs;
let sqs: SQSClient;
let n = 0;

beforeAll(async () => {
  endpoint = await startLocalSqs();
  sqs = new SQSClient({
    endpoint: endpoint.url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    maxAttempts: 1,
  });
});
afterAll(async () => {
  sqs?.destroy();
  await endpoint?.close();
});

const queueWith = async (count: number) => {
  const name = `q-${++n}`;
  const url = endpoint.createQueue(name);
  for (let i = 0; i < count; i++)
    await sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: `${name} #${i}` }));
  return { name, url };
};

describe('receiveAll', () => {
  it('makes what it read visible again when a later queue does not exist, and names that queue', async () => {
    const good = await queueWith(3);
    const missing = endpoint.queueUrl('no-such-queue');
    const error = await receiveAll(sqs, [good.url, missing], { max: 1000, visibilityTimeout: 900 }).catch(
      (e: unknown) => e as Error,
    );
    expect(error).toBeInstanceOf(Error);
    expect(endpoint.messages(good.name).filter((m) => m.visible)).toHaveLength(3);
    expect((error as Error).message).toContain(missing);
  });

  it('reads each message once when the visibility timeout runs out while reading (0 s), and goes on to the next queue', async () => {
    const a = await queueWith(3);
    const b = await queueWith(2);
    const messages = await receiveAll(sqs, [a.url, b.url], { max: 1000, visibilityTimeout: 0 });
    expect(messages.map((m) => m.body).sort()).toEqual([
      `${a.name} #0`,
      `${a.name} #1`,
      `${a.name} #2`,
      `${b.name} #0`,
      `${b.name} #1`,
    ]);
  });
});

const message = (body: unknown, id: string): QueueMessage => ({
  queueUrl: 'http://sqs/123456789012/q',
  messageId: id,
  receiptHandle: id,
  body: JSON.stringify(body),
  attributes: {},
  receiveCount: 1,
  sentAt: undefined,
});
const event = (eventId: string, sequence: unknown) => ({
  id: eventId,
  source: 'shop.orders',
  'detail-type': 'OrderPlaced',
  detail: { metadata: { eventId, aggregateType: 'Order', aggregateId: 'o-1', sequence } },
});

describe('replayOrder', () => {
  it('orders sequences past 2^53 (decimal strings, as the inbox accepts them) exactly', () => {
    const events = [
      event('c', '9007199254740995'),
      event('a', '9007199254740993'),
      event('b', '9007199254740994'),
    ].map((e, i) => readQueueMessage(message(e, `m${i}`)));
    expect(replayOrder(events).map((i) => i.first.eventId)).toEqual(['a', 'b', 'c']);
  });
});
