/**
 * The local Custom Event Bus subscriber (shared/local/subscriber.ts), fed by PutEvents through the
 * relay's own EventsV2 client over HTTP: FIFO per group with one call in flight and a failure
 * holding only its group, the retry policy and the dead-letter record (to the local SQS, through the
 * real SQS client, without the payload), UNORDERED delivery, the RAW and WITH_METADATA payloads,
 * a POINT_IN_TIME subscriber's REPLAY deliveries, and the invocation timeout.
 */
import { LambdaClient } from '@aws-sdk/client-lambda';
import { ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { startLocalLambda } from '../../shared/local/lambda.ts';
import { type LocalSqs, startLocalSqs } from '../../shared/local/sqs.ts';
import {
  type LocalSubscriber,
  lambdaTarget,
  type SubscriberEvent,
  type SubscriberOptions,
  sqsDeadLetter,
  startSubscriber,
  type WithMetadataEvent,
} from '../../shared/local/subscriber.ts';
import {
  EventsV2Client,
  EventsV2PutEventsCommand,
  type EventsV2PutEventsRequestEntry,
} from '../../shared/relay/buses/custom-event-bus-client.ts';

const ARN = 'arn:aws:events:eu-west-1:123456789012:event-busv2/orders/abc123';
const credentials = { accessKeyId: 'local', secretAccessKey: 'local' };

let bus: LocalBus;
let sqs: LocalSqs;
let client: EventsV2Client;
let sqsClient: SQSClient;
const subscribers: LocalSubscriber[] = [];

beforeAll(async () => {
  bus = await startLocalBus({ seed: 3 });
  sqs = await startLocalSqs({ seed: 3 });
  client = new EventsV2Client({ region: 'eu-west-1', credentials, endpoint: bus.url, maxAttempts: 1 });
  sqsClient = new SQSClient({ endpoint: sqs.url, region: 'us-east-1', credentials, maxAttempts: 1 });
});
afterAll(async () => {
  client.destroy();
  sqsClient.destroy();
  await bus.close();
  await sqs.close();
});
beforeEach(async () => {
  await Promise.all(subscribers.splice(0).map((s) => s.close()));
  bus.reset();
  sqs.reset();
});

const entry = (group: string, n: number): EventsV2PutEventsRequestEntry => ({
  Source: 'test.orders',
  DetailType: 'order.changed',
  Detail: JSON.stringify({ group, n }),
  SystemMetadata: { EventGroupId: group, DeduplicationId: `${group}-${n}` },
});

async function put(...entries: EventsV2PutEventsRequestEntry[]) {
  const out = await client.send(new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: entries }));
  expect(out.FailedEntryCount).toBe(0);
}

const subscribe = (o: Omit<SubscriberOptions, 'bus' | 'eventBusArn'>) => {
  const s = startSubscriber({ bus, eventBusArn: ARN, retryDelayMs: () => 5, ...o });
  subscribers.push(s);
  return s;
};

const detailOf = (e: SubscriberEvent | WithMetadataEvent) =>
  ('Data' in e ? e.Data.detail : e.detail) as { group: string; n: number };
const label = (e: SubscriberEvent | WithMetadataEvent) => `${detailOf(e).group}${detailOf(e).n}`;

describe('a FIFO subscriber', () => {
  it('delivers each group in sequence order, one call in flight per group; a failing event holds up only its group', async () => {
    const seen: string[] = [];
    let a2Failures = 0;
    const s = subscribe({
      type: 'FIFO',
      target: async (e) => {
        await new Promise((r) => setTimeout(r, 2));
        if (label(e) === 'a2' && a2Failures < 3) {
          a2Failures++;
          throw new Error('handler failed');
        }
        seen.push(label(e));
      },
    });
    await put(entry('a', 1), entry('b', 1), entry('a', 2), entry('b', 2), entry('a', 3), entry('b', 3));
    await s.idle();
    expect(seen.filter((l) => l.startsWith('a'))).toEqual(['a1', 'a2', 'a3']);
    expect(seen.filter((l) => l.startsWith('b'))).toEqual(['b1', 'b2', 'b3']);
    // b went on while a2 was retried: b3 was delivered before a2 finally was.
    expect(seen.indexOf('b3')).toBeLessThan(seen.indexOf('a2'));
    expect(s.stats).toMatchObject({ delivered: 6, failed: 3, attempts: 9, deadLettered: 0 });
    expect(s.stats.maxInFlightPerGroup).toBe(1);
    expect(s.stats.maxInFlight).toBe(2);
    expect(s.calls.filter((c) => !c.ok).map((c) => c.attempt)).toEqual([1, 2, 3]);
  });

  it("holdUp: 'all': a failed call holds up every group until it is delivered (the retry page's reading)", async () => {
    const seen: string[] = [];
    let a2Failures = 0;
    const s = subscribe({
      type: 'FIFO',
      holdUp: 'all',
      retryDelayMs: () => 30,
      target: async (e) => {
        if (label(e) === 'a2' && a2Failures < 3) {
          a2Failures++;
          throw new Error('handler failed');
        }
        seen.push(label(e));
      },
    });
    await put(entry('a', 1), entry('a', 2));
    // b's events arrive once a2 has failed (waiting for its retry), at most 5 s from now.
    const until = Date.now() + 5_000;
    while (a2Failures === 0 && Date.now() < until) await new Promise((r) => setTimeout(r, 2));
    expect(a2Failures).toBeGreaterThan(0);
    await put(entry('b', 1), entry('b', 2));
    await s.idle();
    expect(seen.filter((l) => l.startsWith('a'))).toEqual(['a1', 'a2']);
    // b waited for a2's three failures and retries: nothing of b before a2 was delivered.
    expect(seen.indexOf('b1')).toBeGreaterThan(seen.indexOf('a2'));
    const a2Delivered = s.calls.find((c) => c.ok && c.eventGroupId === 'a' && c.attempt === 4);
    const b1 = s.calls.find((c) => c.eventGroupId === 'b');
    expect(b1?.startedAt).toBeGreaterThanOrEqual(a2Delivered?.endedAt ?? Number.POSITIVE_INFINITY);
    expect(() => subscribe({ type: 'FIFO', holdUp: 'some' as never, target: async () => {} })).toThrow(
      /holdUp/,
    );
  });

  it('after the retries, writes a record without the payload to the dead-letter queue and moves its group on', async () => {
    const queueUrl = sqs.createQueue('subscriber-dlq');
    const seen: string[] = [];
    const s = subscribe({
      type: 'FIFO',
      retryPolicy: { maxRetryAttempts: 2 },
      deadLetter: sqsDeadLetter(sqsClient, queueUrl),
      target: async (e) => {
        if (label(e) === 'a2') throw new TypeError('cannot apply a2');
        seen.push(label(e));
      },
    });
    await put(entry('a', 1), entry('a', 2), entry('a', 3));
    await s.idle();
    expect(seen).toEqual(['a1', 'a3']);
    expect(s.deadLetterErrors).toEqual([]);
    expect(s.stats).toMatchObject({ delivered: 2, failed: 3, deadLettered: 1, dropped: 0 });
    const out = await sqsClient.send(
      new ReceiveMessageCommand({ QueueUrl: queueUrl, MaxNumberOfMessages: 10 }),
    );
    expect(out.Messages).toHaveLength(1);
    const body = out.Messages?.[0]?.Body ?? '';
    const a2 = bus.events.find((e) => e.deduplicationId === 'a-2');
    expect(JSON.parse(body)).toMatchObject({
      version: '1.0',
      busArn: ARN,
      errorCode: 'TypeError',
      errorMessage: 'cannot apply a2',
      exhaustedRetryCondition: 'MaximumRetryAttempts',
      retryAttempts: 2,
      failedMessages: [{ eventId: a2?.id, eventGroupId: 'a', deduplicationId: 'a-2' }],
    });
    // The record names the event; it does not carry it.
    expect(body).not.toContain('"n":2');
    expect(body).not.toContain('detail');
  });

  it('stops retrying at the maximum event age; without a sink the event is dropped and counted', async () => {
    const s = subscribe({
      type: 'FIFO',
      retryPolicy: { maxRetryAttempts: 185, maxEventAgeSeconds: 0.15 },
      retryDelayMs: () => 20,
      target: async () => {
        throw new Error('down');
      },
    });
    await put(entry('a', 1));
    await s.idle();
    expect(s.stats.dropped).toBe(1);
    expect(s.stats.attempts).toBeGreaterThan(2);
    expect(s.stats.attempts).toBeLessThan(20);
  });

  it('counts a call that does not answer within the invocation timeout as a failed attempt', async () => {
    let calls = 0;
    const s = subscribe({
      type: 'FIFO',
      invocationTimeoutSeconds: 0.05,
      target: async () => {
        calls++;
        if (calls === 1) await new Promise((r) => setTimeout(r, 200));
      },
    });
    await put(entry('a', 1));
    await s.idle();
    expect(s.calls.map((c) => [c.attempt, c.ok, c.error])).toEqual([
      [1, false, 'InvocationTimeout'],
      [2, true, undefined],
    ]);
  });
});

describe('a Lambda target', () => {
  it('invokes the function RequestResponse through the Invoke API; a FunctionError is a failed delivery, retried', async () => {
    let calls = 0;
    const lambda = await startLocalLambda({
      onInvoke: async ({ payload }) => {
        calls++;
        if (calls === 1) throw new Error('cold start failed');
        return { got: label(payload as SubscriberEvent) };
      },
    });
    const lambdaClient = new LambdaClient({
      endpoint: lambda.url,
      region: 'us-east-1',
      credentials,
      maxAttempts: 1,
    });
    try {
      const s = subscribe({ type: 'FIFO', target: lambdaTarget(lambdaClient, 'ledger-fn') });
      await put(entry('a', 1));
      await s.idle();
      expect(s.calls.map((c) => [c.attempt, c.ok])).toEqual([
        [1, false],
        [2, true],
      ]);
      expect(lambda.invocations.map((i) => [i.functionName, i.invocationType])).toEqual([
        ['ledger-fn', 'RequestResponse'],
        ['ledger-fn', 'RequestResponse'],
      ]);
      expect(lambda.invocations[1]?.payload).toMatchObject({
        source: 'test.orders',
        detail: { group: 'a', n: 1 },
      });
    } finally {
      lambdaClient.destroy();
      await lambda.close();
    }
  });
});

describe('an UNORDERED subscriber', () => {
  it('delivers every event, several at once, not in sequence order', async () => {
    const seen: string[] = [];
    const s = subscribe({
      type: 'UNORDERED',
      seed: 11,
      concurrency: 8,
      target: async (e) => {
        await new Promise((r) => setTimeout(r, 3));
        seen.push(label(e));
      },
    });
    const entries = [];
    for (let n = 1; n <= 10; n++) for (const g of ['a', 'b', 'c']) entries.push(entry(g, n));
    await put(...entries);
    await s.idle();
    expect([...seen].sort()).toEqual(
      entries.map((e) => `${JSON.parse(e.Detail ?? '').group}${JSON.parse(e.Detail ?? '').n}`).sort(),
    );
    expect(s.stats.maxInFlight).toBeGreaterThan(1);
    const inOrder = (g: string) => seen.filter((l) => l.startsWith(g)).map((l) => Number(l.slice(1)));
    const sorted = (xs: number[]) => xs.every((x, i) => i === 0 || (xs[i - 1] as number) < x);
    expect(['a', 'b', 'c'].some((g) => !sorted(inOrder(g)))).toBe(true);
  });
});

describe('the payload and the delivery type', () => {
  it('RAW hands the function the EventBridge event; WITH_METADATA adds SystemMetadata, LIVE', async () => {
    const raw: (SubscriberEvent | WithMetadataEvent)[] = [];
    const meta: (SubscriberEvent | WithMetadataEvent)[] = [];
    subscribe({ type: 'FIFO', target: async (e) => void raw.push(e) });
    const s = subscribe({
      type: 'FIFO',
      transformer: 'WITH_METADATA',
      target: async (e) => void meta.push(e),
    });
    await put(entry('a', 1));
    await Promise.all(subscribers.map((x) => x.idle()));
    const accepted = bus.events[0];
    expect(raw).toEqual([
      {
        version: '0',
        id: accepted?.id,
        'detail-type': 'order.changed',
        source: 'test.orders',
        account: '123456789012',
        time: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/),
        region: 'eu-west-1',
        resources: [],
        detail: { group: 'a', n: 1 },
      },
    ]);
    expect(meta).toEqual([
      {
        Data: raw[0],
        SystemMetadata: {
          ContentType: 'application/eventbridge+json',
          'aws:EventId': accepted?.id,
          'aws:IngestionTime': expect.any(String),
          'aws:SequenceNumber': '1',
          'aws:DeliveryType': 'LIVE',
          'aws:Source': 'test.orders',
          'aws:DetailType': 'order.changed',
          EventGroupId: 'a',
          DeduplicationId: 'a-1',
        },
      },
    ]);
    expect(s.stats.replayed).toBe(0);
  });

  it('a POINT_IN_TIME subscriber replays the retained events first, in order, marked REPLAY; new ones are LIVE', async () => {
    const from = Date.now();
    await put(entry('a', 1), entry('b', 1), entry('a', 2));
    const got: WithMetadataEvent[] = [];
    const s = subscribe({
      type: 'FIFO',
      transformer: 'WITH_METADATA',
      startingPosition: { pointInTime: from },
      target: async (e) => void got.push(e as WithMetadataEvent),
    });
    await s.idle();
    await put(entry('a', 3));
    await s.idle();
    expect(got.map((e) => [label(e), e.SystemMetadata['aws:DeliveryType']])).toEqual([
      ['a1', 'REPLAY'],
      ['b1', 'REPLAY'],
      ['a2', 'REPLAY'],
      ['a3', 'LIVE'],
    ]);
    expect(s.stats.replayed).toBe(3);
  });
});
