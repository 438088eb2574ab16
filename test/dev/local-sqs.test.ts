/**
 * The local SQS endpoint through the real `@aws-sdk/client-sqs` over HTTP: the SDK's own MD5
 * checks, its error classes and its retries are the judge of the wire protocol.
 */
import {
  ChangeMessageVisibilityCommand,
  CreateQueueCommand,
  DeleteMessageBatchCommand,
  DeleteMessageCommand,
  GetQueueAttributesCommand,
  GetQueueUrlCommand,
  ListQueuesCommand,
  ReceiveMessageCommand,
  SendMessageBatchCommand,
  SendMessageCommand,
  SQSClient,
} from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { md5OfMessageAttributes } from '../../shared/local/sqs/protocol.ts';
import { type LocalSqs, startLocalSqs } from '../../shared/local/sqs.ts';

let sqs: LocalSqs;
let client: SQSClient;
const clientFor = (maxAttempts?: number) =>
  new SQSClient({
    endpoint: sqs.url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'AKIDLOCAL', secretAccessKey: 'local' },
    ...(maxAttempts === undefined ? {} : { maxAttempts }),
  });

beforeAll(async () => {
  sqs = await startLocalSqs({ seed: 7 });
  client = clientFor(1);
});
afterAll(async () => {
  client.destroy();
  await sqs.close();
});
beforeEach(() => sqs.reset());

/** The error a promise rejects with (fails the test when it resolves). */
async function failure(
  promise: Promise<unknown>,
): Promise<Error & { $metadata?: { httpStatusCode?: number } }> {
  try {
    await promise;
  } catch (error) {
    return error as Error;
  }
  throw new Error('expected a failure');
}

describe('local SQS', () => {
  it('sends, receives and deletes a message with attributes whose MD5s match SQS digests', async () => {
    const { QueueUrl } = await client.send(new CreateQueueCommand({ QueueName: 'orders' }));
    expect(QueueUrl).toBe(`${sqs.url}/123456789012/orders`);
    const attributes = {
      attribName1: { DataType: 'String', StringValue: 'attribValue 1' },
      customNumberTypeAttrib: {
        DataType: 'Number.float',
        StringValue: '4563442423554324324264524243.32543234',
      },
      binaryAttribute: { DataType: 'Binary', BinaryValue: new TextEncoder().encode('Hello binary world!') },
    };
    const sent = await client.send(
      new SendMessageCommand({ QueueUrl, MessageBody: 'héllo 👋', MessageAttributes: attributes }),
    );
    // Digests of these attributes published with aws-md5-of-message-attributes, an implementation
    // independent of this one.
    expect(sent.MD5OfMessageAttributes).toBe('c932db14a896c663f83c260297d594ff');
    expect(
      md5OfMessageAttributes({ attribName1: { DataType: 'String', StringValue: 'attribValue 1' } }),
    ).toBe('19e27d4e946b072f3f58da80d94fd778');

    const { Messages } = await client.send(
      new ReceiveMessageCommand({
        QueueUrl,
        MessageAttributeNames: ['All'],
        MessageSystemAttributeNames: ['ApproximateReceiveCount', 'SentTimestamp'],
      }),
    );
    expect(Messages).toHaveLength(1);
    const [message] = Messages ?? [];
    expect(message?.Body).toBe('héllo 👋');
    expect(message?.MessageId).toBe(sent.MessageId);
    expect(message?.MD5OfMessageAttributes).toBe('c932db14a896c663f83c260297d594ff');
    expect(message?.MessageAttributes?.binaryAttribute?.BinaryValue).toEqual(
      new TextEncoder().encode('Hello binary world!'),
    );
    expect(message?.Attributes?.ApproximateReceiveCount).toBe('1');
    // A receive asking for one attribute gets it, with the digest of what it got.
    await client.send(
      new ChangeMessageVisibilityCommand({
        QueueUrl,
        ReceiptHandle: message?.ReceiptHandle,
        VisibilityTimeout: 0,
      }),
    );
    const filtered = await client.send(
      new ReceiveMessageCommand({ QueueUrl, MessageAttributeNames: ['attrib.*', 'attribName1'] }),
    );
    expect(Object.keys(filtered.Messages?.[0]?.MessageAttributes ?? {})).toEqual(['attribName1']);
    expect(filtered.Messages?.[0]?.MD5OfMessageAttributes).toBe('19e27d4e946b072f3f58da80d94fd778');

    // The first receive's handle is stale now: its delete succeeds without deleting (SQS docs).
    await client.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: message?.ReceiptHandle }));
    expect(sqs.messages('orders')).toHaveLength(1);
    await client.send(
      new DeleteMessageCommand({ QueueUrl, ReceiptHandle: filtered.Messages?.[0]?.ReceiptHandle }),
    );
    expect(sqs.messages('orders')).toEqual([]);
    expect(sqs.stats.byOperation.DeleteMessage).toBe(2);
  });

  it('refuses batches over 10 entries, with repeated ids, over 1 MiB, and a message over the queue size', async () => {
    const QueueUrl = sqs.createQueue('batches', { MaximumMessageSize: '1024' });
    const entries = (n: number) =>
      Array.from({ length: n }, (_, i) => ({ Id: `m${i}`, MessageBody: `body ${i}` }));
    expect(
      (await failure(client.send(new SendMessageBatchCommand({ QueueUrl, Entries: entries(11) })))).name,
    ).toBe('TooManyEntriesInBatchRequest');
    const twice = [...entries(2), { Id: 'm0', MessageBody: 'again' }];
    expect((await failure(client.send(new SendMessageBatchCommand({ QueueUrl, Entries: twice })))).name).toBe(
      'BatchEntryIdsNotDistinct',
    );
    expect((await failure(client.send(new SendMessageBatchCommand({ QueueUrl, Entries: [] })))).name).toBe(
      'EmptyBatchRequest',
    );
    const big = Array.from({ length: 5 }, (_, i) => ({ Id: `b${i}`, MessageBody: 'x'.repeat(250_000) }));
    expect((await failure(client.send(new SendMessageBatchCommand({ QueueUrl, Entries: big })))).name).toBe(
      'BatchRequestTooLong',
    );
    const oversized = await failure(
      client.send(new SendMessageCommand({ QueueUrl, MessageBody: 'x'.repeat(1025) })),
    );
    expect(oversized.name).toBe('InvalidParameterValue');
    expect(
      (await failure(client.send(new SendMessageCommand({ QueueUrl, MessageBody: 'bell \u0007' })))).name,
    ).toBe('InvalidMessageContents');
    expect(sqs.messages('batches')).toEqual([]);

    // One entry over the queue's size fails alone; the others are sent.
    const mixed = await client.send(
      new SendMessageBatchCommand({
        QueueUrl,
        Entries: [...entries(2), { Id: 'big', MessageBody: 'y'.repeat(1025) }],
      }),
    );
    expect(mixed.Successful?.map((s) => s.Id)).toEqual(['m0', 'm1']);
    expect(mixed.Failed).toEqual([
      expect.objectContaining({ Id: 'big', Code: 'InvalidParameterValue', SenderFault: true }),
    ]);
    expect(sqs.messages('batches').map((m) => m.body)).toEqual(['body 0', 'body 1']);
  });

  it('makes a message visible again when its visibility timeout expires, counting receives', async () => {
    const QueueUrl = sqs.createQueue('visibility', { VisibilityTimeout: '1' });
    await client.send(new SendMessageCommand({ QueueUrl, MessageBody: 'again' }));
    const receive = () =>
      client.send(
        new ReceiveMessageCommand({ QueueUrl, MessageSystemAttributeNames: ['ApproximateReceiveCount'] }),
      );
    const first = await receive();
    expect(first.Messages?.[0]?.Attributes?.ApproximateReceiveCount).toBe('1');
    expect((await receive()).Messages).toBeUndefined();
    const counts = await client.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['All'] }));
    expect(counts.Attributes).toMatchObject({
      ApproximateNumberOfMessages: '0',
      ApproximateNumberOfMessagesNotVisible: '1',
    });
    expect(sqs.messages('visibility')[0]).toMatchObject({ visible: false, receiveCount: 1 });

    await new Promise((r) => setTimeout(r, 1_050));
    const second = await receive();
    expect(second.Messages?.[0]?.Body).toBe('again');
    expect(second.Messages?.[0]?.Attributes?.ApproximateReceiveCount).toBe('2');
    // The first handle's message is in flight under a newer handle: too late to change it.
    const stale = await failure(
      client.send(
        new ChangeMessageVisibilityCommand({
          QueueUrl,
          ReceiptHandle: first.Messages?.[0]?.ReceiptHandle,
          VisibilityTimeout: 5,
        }),
      ),
    );
    expect(stale.name).toBe('MessageNotInflight');
  });

  it('makes a message visible at once with ChangeMessageVisibility 0', async () => {
    const QueueUrl = sqs.createQueue('change');
    await client.send(new SendMessageCommand({ QueueUrl, MessageBody: 'now' }));
    const first = await client.send(new ReceiveMessageCommand({ QueueUrl, VisibilityTimeout: 600 }));
    expect((await client.send(new ReceiveMessageCommand({ QueueUrl }))).Messages).toBeUndefined();
    await client.send(
      new ChangeMessageVisibilityCommand({
        QueueUrl,
        ReceiptHandle: first.Messages?.[0]?.ReceiptHandle,
        VisibilityTimeout: 0,
      }),
    );
    expect((await client.send(new ReceiveMessageCommand({ QueueUrl }))).Messages?.[0]?.Body).toBe('now');
  });

  it('answers a long poll as soon as a message is sent', async () => {
    const QueueUrl = sqs.createQueue('long-poll');
    const started = Date.now();
    const polling = client.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 2 }));
    await new Promise((r) => setTimeout(r, 200));
    await client.send(new SendMessageCommand({ QueueUrl, MessageBody: 'wake up' }));
    const { Messages } = await polling;
    expect(Messages?.[0]?.Body).toBe('wake up');
    expect(Date.now() - started).toBeLessThan(1_000);

    // With nothing sent it waits out its time, and the endpoint keeps answering meanwhile.
    const empty = client.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 1 }));
    const t0 = Date.now();
    expect(
      (await client.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ['QueueArn'] })))
        .Attributes,
    ).toEqual({
      QueueArn: 'arn:aws:sqs:us-east-1:123456789012:long-poll',
    });
    expect((await empty).Messages).toBeUndefined();
    expect(Date.now() - t0).toBeGreaterThanOrEqual(900);
  });

  it('moves a message received maxReceiveCount times to the dead-letter queue, intact', async () => {
    sqs.createQueue('work-dlq');
    const QueueUrl = sqs.createQueue('work', {
      VisibilityTimeout: '0',
      RedrivePolicy: JSON.stringify({
        deadLetterTargetArn: 'arn:aws:sqs:us-east-1:123456789012:work-dlq',
        maxReceiveCount: 2,
      }),
    });
    const sent = await client.send(
      new SendMessageCommand({
        QueueUrl,
        MessageBody: 'poison',
        MessageAttributes: { kind: { DataType: 'String', StringValue: 'bad' } },
      }),
    );
    for (let i = 1; i <= 2; i++) {
      const { Messages } = await client.send(new ReceiveMessageCommand({ QueueUrl }));
      expect(Messages?.[0]?.MessageId).toBe(sent.MessageId);
    }
    // The third receive would exceed maxReceiveCount: the message moves instead of coming back.
    expect((await client.send(new ReceiveMessageCommand({ QueueUrl }))).Messages).toBeUndefined();
    expect(sqs.messages('work')).toEqual([]);
    const dead = await client.send(
      new ReceiveMessageCommand({ QueueUrl: sqs.queueUrl('work-dlq'), MessageAttributeNames: ['All'] }),
    );
    expect(dead.Messages?.[0]).toMatchObject({ MessageId: sent.MessageId, Body: 'poison' });
    expect(dead.Messages?.[0]?.MessageAttributes).toEqual({
      kind: { DataType: 'String', StringValue: 'bad' },
    });

    const missing = await failure(
      client.send(
        new CreateQueueCommand({
          QueueName: 'orphan',
          Attributes: {
            RedrivePolicy: JSON.stringify({
              deadLetterTargetArn: 'arn:aws:sqs:us-east-1:123456789012:nope',
              maxReceiveCount: 2,
            }),
          },
        }),
      ),
    );
    expect(missing.name).toBe('InvalidParameterValue');
  });

  it('deletes a batch with one bad receipt handle, failing only that entry', async () => {
    const QueueUrl = sqs.createQueue('partial');
    await client.send(
      new SendMessageBatchCommand({
        QueueUrl,
        Entries: [1, 2, 3].map((n) => ({ Id: `m${n}`, MessageBody: `m${n}` })),
      }),
    );
    const { Messages = [] } = await client.send(
      new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10 }),
    );
    expect(Messages).toHaveLength(3);
    const result = await client.send(
      new DeleteMessageBatchCommand({
        QueueUrl,
        Entries: [
          { Id: 'a', ReceiptHandle: Messages[0]?.ReceiptHandle },
          { Id: 'bad', ReceiptHandle: 'not-a-handle' },
          { Id: 'c', ReceiptHandle: Messages[2]?.ReceiptHandle },
        ],
      }),
    );
    expect(result.Successful?.map((s) => s.Id)).toEqual(['a', 'c']);
    expect(result.Failed).toEqual([
      expect.objectContaining({ Id: 'bad', Code: 'ReceiptHandleIsInvalid', SenderFault: true }),
    ]);
    expect(sqs.messages('partial').map((m) => m.body)).toEqual(['m2']);
  });

  it('creates a queue idempotently for the same attributes and finds it by name and prefix', async () => {
    const first = await client.send(
      new CreateQueueCommand({ QueueName: 'jobs', Attributes: { DelaySeconds: '5' } }),
    );
    const again = await client.send(
      new CreateQueueCommand({ QueueName: 'jobs', Attributes: { DelaySeconds: '5' } }),
    );
    expect(again.QueueUrl).toBe(first.QueueUrl);
    const changed = await failure(
      client.send(new CreateQueueCommand({ QueueName: 'jobs', Attributes: { DelaySeconds: '6' } })),
    );
    expect(changed.name).toBe('QueueNameExists');
    const invalid = await failure(
      client.send(new CreateQueueCommand({ QueueName: 'odd', Attributes: { DelaySeconds: '901' } })),
    );
    expect(invalid.name).toBe('InvalidAttributeValue');
    sqs.createQueue('other');
    expect((await client.send(new GetQueueUrlCommand({ QueueName: 'jobs' }))).QueueUrl).toBe(
      sqs.queueUrl('jobs'),
    );
    expect((await client.send(new ListQueuesCommand({ QueueNamePrefix: 'jo' }))).QueueUrls).toEqual([
      sqs.queueUrl('jobs'),
    ]);
    // DelaySeconds 5: the message is counted as delayed, not receivable.
    await client.send(new SendMessageCommand({ QueueUrl: first.QueueUrl, MessageBody: 'later' }));
    expect(
      (await client.send(new ReceiveMessageCommand({ QueueUrl: first.QueueUrl }))).Messages,
    ).toBeUndefined();
    const attributes = await client.send(
      new GetQueueAttributesCommand({
        QueueUrl: first.QueueUrl,
        AttributeNames: ['ApproximateNumberOfMessagesDelayed'],
      }),
    );
    expect(attributes.Attributes).toEqual({ ApproximateNumberOfMessagesDelayed: '1' });
  });

  it('ends a long poll when the endpoint closes', async () => {
    const own = await startLocalSqs();
    const ownClient = new SQSClient({
      endpoint: own.url,
      region: 'us-east-1',
      credentials: { accessKeyId: 'AKIDLOCAL', secretAccessKey: 'local' },
      maxAttempts: 1,
    });
    const QueueUrl = own.createQueue('closing');
    const started = Date.now();
    const polling = ownClient
      .send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 20 }))
      .catch((e: Error) => e);
    await new Promise((r) => setTimeout(r, 100));
    await own.close();
    const outcome = await polling;
    ownClient.destroy();
    expect(outcome instanceof Error ? outcome : outcome.Messages).toBeUndefined();
    expect(Date.now() - started).toBeLessThan(2_000);
  });

  it('answers QueueDoesNotExist for an unknown queue', async () => {
    const error = await failure(
      client.send(new SendMessageCommand({ QueueUrl: sqs.queueUrl('ghost'), MessageBody: 'x' })),
    );
    expect(error.name).toBe('QueueDoesNotExist');
    expect(error.$metadata?.httpStatusCode).toBe(400);
    expect(sqs.stats.errors).toBe(1);
  });

  it('throttles with RequestThrottled, which a default client retries', async () => {
    const QueueUrl = sqs.createQueue('throttled');
    sqs.setFaults({ throttleRate: 1 });
    const error = await failure(client.send(new SendMessageCommand({ QueueUrl, MessageBody: 'x' })));
    expect(error.name).toBe('RequestThrottled');
    expect(sqs.stats.throttled).toBe(1);
    expect(sqs.messages('throttled')).toEqual([]);

    // Seeded dice: with seed 7 and a 0.5 rate the default client (3 attempts) gets through.
    sqs.setFaults({ throttleRate: 0.5 });
    const retrying = clientFor();
    const sent = await retrying.send(new SendMessageCommand({ QueueUrl, MessageBody: 'persistent' }));
    retrying.destroy();
    expect(sent.MessageId).toBeDefined();
    expect(sqs.stats.throttled).toBeGreaterThan(1);
    expect(sqs.messages('throttled').map((m) => m.body)).toEqual(['persistent']);
  });

  it('injects server errors, and lost responses after the message is stored', async () => {
    const QueueUrl = sqs.createQueue('faults');
    sqs.setFaults({ serverErrorRate: 1 });
    const error = await failure(client.send(new SendMessageCommand({ QueueUrl, MessageBody: 'x' })));
    expect(error.name).toBe('InternalError');
    expect(error.$metadata?.httpStatusCode).toBe(500);
    expect(sqs.messages('faults')).toEqual([]);

    sqs.setFaults({ lostResponseRate: 1 });
    const lost = await failure(client.send(new SendMessageCommand({ QueueUrl, MessageBody: 'landed' })));
    expect(lost.name).not.toBe('InternalError');
    expect(sqs.messages('faults').map((m) => m.body)).toEqual(['landed']);
    expect(sqs.stats).toMatchObject({ serverErrors: 1, lostResponses: 1 });
  });

  it('answers an unknown operation as SQS does, whatever the name', async () => {
    for (const target of ['AmazonSQS.DeleteEverything', 'AmazonSQS.toString']) {
      const response = await fetch(sqs.url, {
        method: 'POST',
        headers: { 'content-type': 'application/x-amz-json-1.0', 'x-amz-target': target },
        body: '{}',
      });
      expect(response.status).toBe(400);
      expect(response.headers.get('x-amzn-query-error')).toBe('InvalidAction;Sender');
      expect(((await response.json()) as { __type: string }).__type).toMatch(/UnknownOperationException$/);
    }
  });
});
