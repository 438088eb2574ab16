/**
 * The local delivery of `outbox bus --deliver` (shared/local/delivery.ts) on a stack as the
 * template reader gives it, with one small bundle for its three functions, whose every call is a
 * line in a file: a rule's pattern and Lambda's asynchronous retries with the on-failure record, an
 * SQS target read in batches with partial failures and redriven to its dead-letter queue, a FIFO
 * Custom Event Bus subscriber (one aggregate held up by its failing event, the other going on, a
 * dead-letter record), and the local Lambda endpoint by the consumer's name. Events reach the local
 * bus through the real clients. The installed command is run by test/repo/package.test.ts.
 */
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { EventBridgeClient, PutEventsCommand } from '@aws-sdk/client-eventbridge';
import { InvokeCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { ReceiveMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { type LocalDelivery, startLocalDelivery } from '../../shared/local/delivery.ts';
import { checkEventPattern, matchesEventPattern } from '../../shared/local/event-pattern.ts';
import type { SynthesisedStack, TemplateFunction } from '../../shared/local/lambda-runtime/template.ts';
import {
  EventsV2Client,
  EventsV2PutEventsCommand,
} from '../../shared/relay/buses/custom-event-bus-client.ts';

const CUSTOM_BUS = 'arn:aws:events:us-east-1:000000000000:event-busv2/demo/local';
const credentials = { accessKeyId: 'local', secretAccessKey: 'local' };
const HANDLER = `import { appendFileSync } from 'node:fs';
const log = (x) => appendFileSync(process.env.CALLS_FILE, JSON.stringify({ fn: process.env.FN, ...x }) + '\\n');
export const handler = async (event) => {
  if (event.Records) {
    const batchItemFailures = [];
    for (const r of event.Records) {
      const e = JSON.parse(r.body);
      log({ n: e.detail.n, batch: event.Records.length });
      if (e.detail.fail) batchItemFailures.push({ itemIdentifier: r.messageId });
    }
    return { batchItemFailures };
  }
  const e = event.Data ?? event;
  log({ n: e.detail.n, group: e.detail.group });
  if (e.detail.fail) throw new Error('failing ' + e.detail.n);
  return { ok: e.detail.n };
};
`;

let dir: string;
let bus: LocalBus;
let delivery: LocalDelivery;
const lines: string[] = [];
let sqs: SQSClient;

const fn = (logicalId: string, consumer: string): TemplateFunction => ({
  logicalId,
  path: logicalId,
  assetDir: dir,
  handler: 'index.handler',
  runtime: 'nodejs24.x',
  memoryMb: 256,
  timeoutSeconds: 10,
  environment: {
    FN: consumer,
    OUTBOX_INBOX_CONSUMER: consumer,
    CALLS_FILE: join(dir, 'calls.jsonl'),
    PGHOST: 'proxy.example',
  },
});
const queue = (logicalId: string, redrive?: { deadLetterLogicalId: string; maxReceiveCount: number }) => ({
  logicalId,
  name: `Shop-${logicalId}`,
  visibilityTimeoutSeconds: 1_000,
  retentionSeconds: 86_400,
  redrive,
});

/** Every call the functions made, in order. */
async function calls(): Promise<{ fn: string; n: number; group?: string; batch?: number }[]> {
  const text = await readFile(join(dir, 'calls.jsonl'), 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter(Boolean)
    .map((l) => JSON.parse(l));
}
async function until<T>(read: () => Promise<T>, done: (value: T) => boolean, what: string): Promise<T> {
  const deadline = Date.now() + 20_000;
  for (;;) {
    const value = await read();
    if (done(value)) return value;
    if (Date.now() > deadline) throw new Error(`${what}: ${JSON.stringify(value)}\n${lines.join('\n')}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
async function messages(queueName: string): Promise<unknown[]> {
  const out = await sqs.send(
    new ReceiveMessageCommand({
      QueueUrl: `${delivery.sqsUrl}/123456789012/Shop-${queueName}`,
      MaxNumberOfMessages: 10,
      VisibilityTimeout: 0,
    }),
  );
  return (out.Messages ?? []).map((m) => JSON.parse(m.Body ?? '{}'));
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'outbox-delivery-'));
  await writeFile(join(dir, 'index.mjs'), HANDLER);
  bus = await startLocalBus();
  const stack: SynthesisedStack = {
    functions: [fn('BillingFn', 'billing'), fn('ShippingFn', 'shipping'), fn('LedgerFn', 'ledger')],
    queues: [
      queue('BillingFailed'),
      queue('ShippingDlq'),
      queue('ShippingQueue', { deadLetterLogicalId: 'ShippingDlq', maxReceiveCount: 2 }),
      queue('LedgerDlq'),
    ],
    asyncConfigs: [
      {
        functionLogicalId: 'BillingFn',
        maximumRetryAttempts: 2,
        maximumEventAgeSeconds: 21_600,
        onFailureQueueLogicalId: 'BillingFailed',
      },
    ],
    rules: [
      {
        logicalId: 'BillingRule',
        pattern: { source: ['shop'], 'detail-type': ['OrderPlaced'] },
        targets: [
          { kind: 'lambda', logicalId: 'BillingFn', deadLetterQueueLogicalId: undefined, retryAttempts: 185 },
        ],
      },
      {
        logicalId: 'ShippingRule',
        pattern: { 'detail-type': [{ prefix: 'OrderShip' }] },
        targets: [
          {
            kind: 'sqs',
            logicalId: 'ShippingQueue',
            deadLetterQueueLogicalId: undefined,
            retryAttempts: 185,
          },
        ],
      },
    ],
    eventSources: [
      {
        functionLogicalId: 'ShippingFn',
        queueLogicalId: 'ShippingQueue',
        batchSize: 10,
        reportBatchItemFailures: true,
      },
    ],
    subscribers: [
      {
        logicalId: 'LedgerSubscriber',
        type: 'FIFO',
        filters: [{ scope: 'DATA', pattern: { source: ['shop'] } }],
        functionLogicalId: 'LedgerFn',
        maxRetryAttempts: 2,
        maxEventAgeSeconds: 60,
        deadLetterQueueLogicalId: 'LedgerDlq',
        transformer: 'RAW',
      },
    ],
    schedules: [],
    alarms: [],
    secrets: new Map(),
    buses: new Map(),
    outputs: new Map(),
    unresolved: [],
  };
  delivery = await startLocalDelivery({
    bus,
    stacks: [{ name: 'Shop', stack }],
    customEventBusArn: CUSTOM_BUS,
    environment: { DATABASE_URL: 'postgres://local@127.0.0.1:5432/none' },
    retryDelayScale: 0.001,
    log: (line) => lines.push(line),
  });
  sqs = new SQSClient({ endpoint: delivery.sqsUrl, region: 'us-east-1', credentials });
}, 30_000);

afterAll(async () => {
  sqs?.destroy();
  await delivery?.close();
  await bus?.close();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('outbox bus --deliver, on a synthesised stack', () => {
  it('says what each consumer gets', () => {
    expect(delivery.consumers.map((c) => [c.name, c.topology, c.functionNames.sort()])).toEqual([
      ['billing', 'direct', ['BillingFn', 'billing']],
      ['shipping', 'queue', ['ShippingFn', 'shipping']],
      ['ledger', 'subscriber', ['LedgerFn', 'ledger']],
    ]);
  });

  it("a rule's Lambda target: its pattern, Lambda's 2 retries, then the invocation record in the on-failure queue", async () => {
    const client = new EventBridgeClient({ endpoint: bus.url, region: 'us-east-1', credentials });
    const put = (source: string, n: number, fail = false) => ({
      EventBusName: 'demo',
      Source: source,
      DetailType: 'OrderPlaced',
      Detail: JSON.stringify({ n, fail }),
    });
    await client.send(
      new PutEventsCommand({ Entries: [put('shop', 1), put('elsewhere', 2), put('shop', 3, true)] }),
    );
    client.destroy();
    const record = (
      await until(
        () => messages('BillingFailed'),
        (m) => m.length === 1,
        'the on-failure record',
      )
    )[0];
    expect(record).toMatchObject({
      requestContext: { condition: 'RetriesExhausted', approximateInvokeCount: 3 },
      requestPayload: { source: 'shop', detail: { n: 3 } },
      responsePayload: { errorType: 'Error', errorMessage: 'failing 3' },
    });
    // Event 1's invocation may end after event 3's record (each started an environment of its own).
    const billing = await until(
      async () => (await calls()).filter((c) => c.fn === 'billing').map((c) => c.n),
      (n) => n.length >= 4,
      'billing called 4 times',
    );
    expect(billing.sort()).toEqual([1, 3, 3, 3]);
    expect(
      lines.some((l) =>
        /billing ← OrderPlaced: failed \(Error: failing 3\); Lambda retries it \(2 of 2\)/.test(l),
      ),
    ).toBe(true);
  });

  it('an SQS target: a batch with a partial failure, the failed message received again, then in the dead-letter queue', async () => {
    const client = new EventBridgeClient({ endpoint: bus.url, region: 'us-east-1', credentials });
    await client.send(
      new PutEventsCommand({
        Entries: [10, 11].map((n) => ({
          EventBusName: 'demo',
          Source: 'shop',
          DetailType: 'OrderShipped',
          Detail: JSON.stringify({ n, fail: n === 11 }),
        })),
      }),
    );
    client.destroy();
    const dead = await until(
      () => messages('ShippingDlq'),
      (m) => m.length === 1,
      'the dead-letter queue',
    );
    expect(dead[0]).toMatchObject({ 'detail-type': 'OrderShipped', detail: { n: 11 } });
    const shipping = (await calls()).filter((c) => c.fn === 'shipping').map((c) => c.n);
    expect(shipping.filter((n) => n === 10)).toHaveLength(1);
    expect(shipping.filter((n) => n === 11)).toHaveLength(2); // maxReceiveCount
  });

  it('a FIFO subscriber of the Custom Event Bus: a failing event holds up its own aggregate only, then its dead-letter record', async () => {
    const client = new EventsV2Client({
      region: 'us-east-1',
      credentials,
      endpoint: bus.url,
      maxAttempts: 1,
    });
    const entry = (group: string, n: number, fail = false) => ({
      Source: 'shop',
      DetailType: 'OrderPlaced',
      Detail: JSON.stringify({ group, n, fail }),
      SystemMetadata: { EventGroupId: group, DeduplicationId: `${group}-${n}` },
    });
    await client.send(
      new EventsV2PutEventsCommand({
        EventBusArn: CUSTOM_BUS,
        Entries: [entry('a', 20, true), entry('a', 21), entry('b', 22)],
      }),
    );
    client.destroy();
    await until(
      () => messages('LedgerDlq'),
      (m) => m.length === 1,
      'the dead-letter record',
    );
    await delivery.idle(20_000);
    const ledger = (await calls()).filter((c) => c.fn === 'ledger');
    const a = ledger.filter((c) => c.group === 'a').map((c) => c.n);
    expect(a).toEqual([20, 20, 20, 21]);
    expect(ledger.filter((c) => c.group === 'b').map((c) => c.n)).toEqual([22]);
  });

  it("the local Lambda endpoint invokes a consumer's function by its consumer's name, as the replay commands do", async () => {
    const lambda = new LambdaClient({ endpoint: delivery.lambdaUrl, region: 'us-east-1', credentials });
    const out = await lambda.send(
      new InvokeCommand({
        FunctionName: 'billing',
        Payload: Buffer.from(JSON.stringify({ 'detail-type': 'OrderPlaced', detail: { n: 30 } })),
      }),
    );
    lambda.destroy();
    expect(out.FunctionError).toBeUndefined();
    expect(JSON.parse(Buffer.from(out.Payload ?? []).toString())).toEqual({ ok: 30 });
  });
});

describe('event patterns, evaluated locally', () => {
  const event = {
    source: 'shop',
    'detail-type': 'OrderPlaced',
    detail: { total: 12, tags: ['a', 'b'], note: 'Rush' },
  };
  it.each([
    [{ source: ['shop'] }, true],
    [{ source: ['other'] }, false],
    [{ detail: { total: [{ numeric: ['>', 10, '<=', 12] }] } }, true],
    [{ detail: { total: [{ numeric: ['>', 12] }] } }, false],
    [{ detail: { tags: ['b'] } }, true],
    [{ detail: { missing: [{ exists: false }] } }, true],
    [{ detail: { note: [{ 'equals-ignore-case': 'rush' }] } }, true],
    [{ detail: { note: [{ 'anything-but': ['Rush'] }] } }, false],
    [{ 'detail-type': [{ wildcard: 'Order*' }] }, true],
    [{ $or: [{ source: ['x'] }, { detail: { total: [12] } }] }, true],
  ])('%j matches: %s', (pattern, matches) => {
    expect(matchesEventPattern(pattern as never, event)).toBe(matches);
  });

  it('refuses a filter it does not evaluate, naming the field', () => {
    expect(() => checkEventPattern({ detail: { ip: [{ cidr: '10.0.0.0/24' }] } })).toThrow(
      'detail.ip: the local delivery does not evaluate the "cidr" filter',
    );
  });
});
