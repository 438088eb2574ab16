/**
 * `outbox inbox queue list|replay`: a consumer's failure queues as an operator meets them after an
 * outage — the direct topology's invocation records, EventBridge's undelivered events (with the
 * delivery error in message attributes), the queue topology's dead-lettered events, a copy of one
 * event in two queues, and a message that is no event at all. The real `outbox` command, the real
 * SQS client against the local SQS endpoint, the real Lambda client against the local Invoke
 * endpoint running the consumer's inbox on a real Postgres.
 */
import { randomUUID } from 'node:crypto';
import { type MessageAttributeValue, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import middy from '@middy/core';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery } from '../../../dev/delivery.ts';
import { inbox } from '../../../shared/consumer/index.ts';
import { type LocalLambda, startLocalLambda } from '../../../shared/local/lambda.ts';
import { type LocalSqs, startLocalSqs } from '../../../shared/local/sqs.ts';
import { EnvVar, type Sql } from '../../../shared/platform/index.ts';
import { collect, runCli, startCli } from '../../support/cli.ts';
import { createTestDatabase, type TestDatabase } from '../../support/db.ts';
import { lambdaContext } from '../../support/lambda.ts';
import { createTestRoles, type TestRoles } from '../../support/roles.ts';

let db: TestDatabase;
let testRoles: TestRoles;
let consumerSql: Sql;
let lambda: LocalLambda;
let sqsEndpoint: LocalSqs;
let sqs: SQSClient;
/** The cause of the failures, fixed before the replay that succeeds. */
let priceListMissing = false;
/** How long each invocation takes, ms (a slow function, for the interruption). */
let invokeDelayMs = 0;
let failedQueue: string;
let deadLetterQueue: string;

beforeAll(async () => {
  db = await createTestDatabase();
  testRoles = await createTestRoles(db);
  await db.sql`create table effect (event_id text not null, sequence int not null, arrival text not null)`;
  await db.sql.unsafe(`grant select, insert on effect to "${testRoles.roles.consumer}"`);
  consumerSql = testRoles.connectAs(testRoles.roles.consumer);
  const billing = inbox(
    {
      sql: consumerSql,
      consumer: 'billing',
      order: 'wait-for-gap',
      gapWaitSeconds: 0,
      onGapTimeout: 'park',
      metrics: false,
    },
    async (_event, { inbox: i }) => {
      if (priceListMissing) throw new Error(`cannot invoice order ${i.metadata.aggregateId}: no price list`);
      await i.tx`insert into effect values (${i.metadata.eventId}, ${i.metadata.sequence}, ${i.arrival})`;
      return { invoiced: i.metadata.sequence };
    },
  );
  // The same consumer behind a middleware that answers for a failure with a success (a middy
  // `onError` returning a value): Lambda reports no FunctionError, the inbox left its trace.
  const swallowing = middy<EventBridgeEvent<string, unknown>, unknown>()
    .use({ onError: async () => ({ ok: false }) })
    .handler(billing as never);
  lambda = await startLocalLambda({
    onInvoke: async (invocation) => {
      if (invocation.functionName === 'billing-swallowing-fn')
        return swallowing(
          invocation.payload as EventBridgeEvent<string, unknown>,
          lambdaContext(30_000, 'billing-swallowing-fn'),
        );
      if (invocation.functionName !== 'billing-fn') throw new Error(`no function ${invocation.functionName}`);
      if (invokeDelayMs > 0) await new Promise((r) => setTimeout(r, invokeDelayMs));
      return billing(
        invocation.payload as EventBridgeEvent<string, unknown>,
        lambdaContext(30_000, 'billing-fn'),
      );
    },
    functions: {
      'billing-fn': { environment: { [EnvVar.inboxConsumer]: 'billing' } },
      'billing-swallowing-fn': { environment: { [EnvVar.inboxConsumer]: 'billing' } },
      'shipping-fn': { environment: { [EnvVar.inboxConsumer]: 'shipping' } },
    },
  });
  sqsEndpoint = await startLocalSqs();
  sqs = new SQSClient({
    endpoint: sqsEndpoint.url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
});
afterAll(async () => {
  sqs?.destroy();
  await sqsEndpoint?.close();
  await lambda?.close();
  await testRoles?.drop();
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, inbox_failed, effect`;
  priceListMissing = false;
  invokeDelayMs = 0;
  // Fresh queues per test: the consumer's on-failure queue and its rule target's dead-letter queue.
  const run = randomUUID().slice(0, 8);
  failedQueue = await sqsEndpoint.createQueue(`billing-failed-${run}`);
  deadLetterQueue = await sqsEndpoint.createQueue(`billing-dlq-${run}`);
});

const event = (aggregateId: string, sequence: number) =>
  delivery({ detailType: 'OrderPlaced', metadata: { eventId: randomUUID(), aggregateId, sequence } });
const eventIdOf = (e: EventBridgeEvent<string, unknown>) =>
  (e.detail as { metadata: { eventId: string } }).metadata.eventId;

const send = (queueUrl: string, body: string, attributes?: Record<string, MessageAttributeValue>) =>
  sqs.send(new SendMessageCommand({ QueueUrl: queueUrl, MessageBody: body, MessageAttributes: attributes }));
/** What Lambda sends its on-failure destination after the last retry. */
const invocationRecord = (e: EventBridgeEvent<string, unknown>) =>
  JSON.stringify({
    version: '1.0',
    timestamp: new Date().toISOString(),
    requestContext: {
      requestId: randomUUID(),
      functionArn: 'arn:aws:lambda:us-east-1:123456789012:function:billing-fn:$LATEST',
      condition: 'RetriesExhausted',
      approximateInvokeCount: 3,
    },
    requestPayload: e,
    responseContext: { statusCode: 200, executedVersion: '$LATEST', functionError: 'Unhandled' },
    responsePayload: { errorType: 'Error', errorMessage: 'cannot invoice: no price list' },
  });
/** What EventBridge sends a rule target's dead-letter queue. */
const undelivered = (e: EventBridgeEvent<string, unknown>) =>
  send(deadLetterQueue, JSON.stringify(e), {
    ERROR_CODE: { DataType: 'String', StringValue: 'SDK_CLIENT_ERROR' },
    ERROR_MESSAGE: { DataType: 'String', StringValue: 'Unable to invoke Lambda function: Rate Exceeded.' },
    RETRY_ATTEMPTS: { DataType: 'Number', StringValue: '185' },
  });

const cliArgs = (args: string[]) => [
  'inbox',
  'queue',
  ...args,
  '--queue-url',
  failedQueue,
  '--queue-url',
  deadLetterQueue,
];
const cliOptions = () => ({
  env: {
    HOME: process.env.HOME,
    AWS_ENDPOINT_URL_LAMBDA: lambda.url,
    AWS_ENDPOINT_URL_SQS: sqsEndpoint.url,
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'local',
    AWS_SECRET_ACCESS_KEY: 'local',
    AWS_EC2_METADATA_DISABLED: 'true',
    // The replay reads the inbox's failure traces to tell what the function took (as the consumer).
    DATABASE_URL: testRoles.urlOf(testRoles.roles.consumer),
  },
});
const cli = (args: string[]) => runCli(cliArgs(args), cliOptions());
const replay = (...args: string[]) => cli(['replay', '--consumer', 'billing', ...args]);
const effects = async () =>
  (
    await db.sql<{ sequence: number; arrival: string }[]>`select sequence, arrival from effect order by ctid`
  ).map((r) => `#${r.sequence} ${r.arrival}`);
const inQueues = () => [
  ...sqsEndpoint.messages(failedQueue.split('/').at(-1) as string),
  ...sqsEndpoint.messages(deadLetterQueue.split('/').at(-1) as string),
];

/**
 * An outage's leftovers: o-8 #2 failed every attempt; o-8 #1 was never delivered, twice (EventBridge
 * delivers at least once); o-9 #1 failed every receive of the queue topology; one stray message.
 */
async function leftovers() {
  const [o8n1, o8n2, o9n1] = [event('o-8', 1), event('o-8', 2), event('o-9', 1)];
  await send(failedQueue, invocationRecord(o8n2));
  await undelivered(o8n1);
  await send(failedQueue, JSON.stringify(o9n1)); // the queue topology's dead-letter queue holds the event itself
  await undelivered(o8n1);
  await send(deadLetterQueue, 'not an event');
  return { o8n1, o8n2, o9n1 };
}

describe('outbox inbox queue', () => {
  it('lists the three shapes in the order a replay takes them, and leaves every message in its queue', async () => {
    const { o8n1, o8n2, o9n1 } = await leftovers();
    const listed = await cli(['list', '--json']);
    expect(listed.code, listed.stderr).toBe(0);
    const { events, unreadable } = JSON.parse(listed.stdout);
    expect(
      events.map((e: { eventId: string; kind: string; copies: number }) => [e.eventId, e.kind, e.copies]),
    ).toEqual([
      [eventIdOf(o8n1), 'undelivered', 1],
      [eventIdOf(o8n2), 'invocation-record', 0],
      [eventIdOf(o9n1), 'event', 0],
    ]);
    expect(events[0].error).toMatch(/not delivered: SDK_CLIENT_ERROR — Unable to invoke Lambda function/);
    expect(events[1].error).toMatch(/RetriesExhausted after 3 attempt\(s\) — Error: cannot invoice/);
    expect(unreadable).toMatchObject([{ kind: 'unreadable', error: 'the message body is not JSON' }]);
    // Listed, not taken: all five visible again at once.
    expect(inQueues().filter((m) => m.visible)).toHaveLength(5);
    // The human form: one line per event and the total.
    const human = await cli(['list']);
    expect(human.stdout.trim().split('\n')).toHaveLength(4);
    expect(human.stderr).toMatch(/3 event\(s\) in 5 message\(s\), 1 unreadable/);
    // Stopped by --max before the dead-letter queue: said so, exit 1.
    const partial = await cli(['list', '--max', '2']);
    expect(partial.code).toBe(1);
    expect(partial.stderr).toMatch(/read 2 message\(s\), --max: the queues may hold more/);
    expect(inQueues().filter((m) => m.visible)).toHaveLength(5);
  });

  it('replays in each aggregate order, holds what follows a failure, deletes what the function took, and a second replay is a duplicate', async () => {
    const { o8n1, o8n2, o9n1 } = await leftovers();
    priceListMissing = true;
    const broken = await replay('--function-name', 'billing-fn', '--yes', '--json');
    expect(broken.code).toBe(1);
    expect(JSON.parse(broken.stdout)).toMatchObject({
      replayed: 0,
      of: 3,
      events: [
        { eventId: eventIdOf(o8n1), outcome: 'failed' },
        { eventId: eventIdOf(o8n2), outcome: 'held' },
        { eventId: eventIdOf(o9n1), outcome: 'failed' },
      ],
    });
    expect(inQueues().filter((m) => m.visible)).toHaveLength(5);
    expect(await effects()).toEqual([]);

    priceListMissing = false;
    const fixed = await replay('--function-name', 'billing-fn', '--yes');
    // The stray message is left, and said so: the exit code is 1.
    expect(fixed.code).toBe(1);
    expect(fixed.stdout).toMatch(
      /replayed 3 of 3 event\(s\) through billing-fn: 3 applied, 0 duplicate, 0 stale, 0 parked; 0 failed, 0 held and 1 unreadable left/,
    );
    expect(await effects()).toEqual(['#1 next', '#2 next', '#1 next']);
    // Both copies of o-8 #1 went with it; only the stray message is left.
    expect(inQueues().map((m) => m.body)).toEqual(['not an event']);

    await send(failedQueue, invocationRecord(o8n1)); // found again later, e.g. after a failed delivery of a copy
    const again = await replay('--function-name', 'billing-fn', '--yes', '--json');
    expect(JSON.parse(again.stdout)).toMatchObject({
      replayed: 1,
      of: 1,
      events: [{ outcome: 'duplicate' }],
    });
    expect(await effects()).toHaveLength(3);
  });

  it("refuses another consumer's function and a replay without a function, invoking and deleting nothing", async () => {
    await leftovers();
    const invoked = lambda.invocations.length;
    const wrong = await replay('--function-name', 'shipping-fn', '--yes');
    expect(wrong.code).toBe(2);
    expect(wrong.stderr).toMatch(/OUTBOX_INBOX_CONSUMER/);
    const none = await replay('--yes');
    expect(none.code).toBe(2);
    expect(none.stderr).toMatch(/give --function-name/);
    const dry = await replay('--dry-run');
    expect(dry.code, dry.stderr).toBe(0);
    expect(
      dry.stdout
        .trim()
        .split('\n')
        .map(
          (l) => (JSON.parse(l) as { detail: { metadata: { sequence: number } } }).detail.metadata.sequence,
        ),
    ).toEqual([1, 2, 1]);
    expect(lambda.invocations.length).toBe(invoked);
    expect(inQueues().filter((m) => m.visible)).toHaveLength(5);
  });

  it('Ctrl-C stops after the current invocation and makes the messages not replayed visible again', async () => {
    const [a, b, c] = [event('o-1', 1), event('o-2', 1), event('o-3', 1)];
    for (const e of [a, b, c]) await send(failedQueue, JSON.stringify(e));
    invokeDelayMs = 1_500;
    const invoked = lambda.invocations.length;
    const child = startCli(
      cliArgs(['replay', '--consumer', 'billing', '--function-name', 'billing-fn', '--yes', '--json']),
      cliOptions(),
    );
    const result = collect(child);
    while (lambda.invocations.length === invoked) await new Promise((r) => setTimeout(r, 20));
    child.kill('SIGINT');
    const done = await result;
    expect(done.code, done.stderr).toBe(1);
    expect(done.stderr).toMatch(/interrupted: stopping after the current invocation/);
    expect(JSON.parse(done.stdout)).toMatchObject({
      replayed: 1,
      of: 3,
      events: [
        { eventId: eventIdOf(a), outcome: 'applied' },
        { eventId: eventIdOf(b), outcome: 'held', error: 'the replay was interrupted before it' },
        { eventId: eventIdOf(c), outcome: 'held' },
      ],
    });
    const left = inQueues();
    expect(left.map((m) => JSON.parse(m.body).detail.metadata.eventId)).toEqual([eventIdOf(b), eventIdOf(c)]);
    expect(left.every((m) => m.visible)).toBe(true);
  });

  it('a failure a middleware answered for with a success is counted failed, not applied, and its message stays (issue 45, item 5)', async () => {
    const [a, b] = [event('o-5', 1), event('o-5', 2)];
    for (const e of [a, b]) await send(failedQueue, JSON.stringify(e));
    priceListMissing = true;
    const broken = await replay('--function-name', 'billing-swallowing-fn', '--yes', '--json');
    expect(broken.code, broken.stderr).toBe(1);
    expect(JSON.parse(broken.stdout)).toMatchObject({
      replayed: 0,
      of: 2,
      events: [
        { eventId: eventIdOf(a), outcome: 'failed' },
        { eventId: eventIdOf(b), outcome: 'held' },
      ],
    });
    expect(JSON.parse(broken.stdout).events[0].error).toMatch(/inbox_failed/);
    expect(await effects()).toEqual([]);
    expect(inQueues().filter((m) => m.visible)).toHaveLength(2);

    priceListMissing = false;
    const fixed = await replay('--function-name', 'billing-swallowing-fn', '--yes');
    expect(fixed.code, fixed.stderr).toBe(0);
    expect(fixed.stdout).toMatch(/replayed 2 of 2 event\(s\) through billing-swallowing-fn: 2 applied/);
    expect(await effects()).toEqual(['#1 next', '#2 next']);
    expect(inQueues()).toEqual([]);
  });
});
