/**
 * The local bus's Custom Event Bus (EventsV2) PutEvents, through the relay's own EventsV2 client
 * over HTTP: the wire protocol (RPC v2 CBOR, SigV4, the endpoint variable), the API's limits, the
 * 5-minute deduplication, sequence numbers and FIFO order per group, and the injected faults.
 */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  DEDUP_WINDOW_MS,
  fifoDeliveries,
  type LocalBus,
  MAX_DEDUPLICATION_ID_LENGTH,
  startLocalBus,
} from '../../shared/local/bus.ts';
import {
  EVENTSV2_ENDPOINT_ENV,
  EventsV2Client,
  EventsV2PutEventsCommand,
  type EventsV2PutEventsRequestEntry,
} from '../../shared/relay/buses/custom-event-bus-client.ts';

const ARN = 'arn:aws:events:eu-west-1:123456789012:event-busv2/orders/abc123';
const credentials = { accessKeyId: 'local', secretAccessKey: 'local' };

const entry = (group: string, n: number, dedup = `${group}-${n}`): EventsV2PutEventsRequestEntry => ({
  Source: 'test.orders',
  DetailType: 'order.changed',
  Detail: JSON.stringify({ group, n }),
  Time: new Date('2026-12-01T10:00:00Z'),
  SystemMetadata: { EventGroupId: group, DeduplicationId: dedup },
});

let bus: LocalBus;
let client: EventsV2Client;

beforeAll(async () => {
  bus = await startLocalBus({ seed: 7 });
  client = new EventsV2Client({ region: 'eu-west-1', credentials, endpoint: bus.url, maxAttempts: 1 });
});
afterAll(async () => {
  client.destroy();
  await bus.close();
});
beforeEach(() => {
  bus.reset();
  bus.setFaults({});
});

describe('the Custom Event Bus on the local bus', () => {
  it('accepts PutEvents over RPC v2 CBOR: PUBLISHED, sequence numbers, group and dedup ids recorded', async () => {
    const out = await client.send(
      new EventsV2PutEventsCommand({
        EventBusArn: ARN,
        Entries: [entry('a', 1), entry('b', 1), entry('a', 2)],
      }),
    );
    expect(out.FailedEntryCount).toBe(0);
    expect(out.Entries?.map((e) => [e.SuccessCode, e.SequenceNumber])).toEqual([
      ['PUBLISHED', '1'],
      ['PUBLISHED', '2'],
      ['PUBLISHED', '3'],
    ]);
    expect(
      bus.events.map((e) => [e.eventBusName, e.eventGroupId, e.deduplicationId, e.sequenceNumber]),
    ).toEqual([
      [ARN, 'a', 'a-1', '1'],
      [ARN, 'b', 'b-1', '2'],
      [ARN, 'a', 'a-2', '3'],
    ]);
    expect(bus.events[0]?.time).toBe('2026-12-01T10:00:00.000Z');
    expect(bus.events[0]?.detail).toEqual({ group: 'a', n: 1 });
    expect(fifoDeliveries(bus.events, 'a').map((e) => e.detail.n)).toEqual([1, 2]);
  });

  it('is found through AWS_ENDPOINT_URL_EVENTBRIDGEV2, as the SDK names it', async () => {
    const previous = process.env[EVENTSV2_ENDPOINT_ENV];
    process.env[EVENTSV2_ENDPOINT_ENV] = bus.url;
    try {
      const fromEnv = new EventsV2Client({ region: 'eu-west-1', credentials });
      const out = await fromEnv.send(
        new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: [entry('e', 1)] }),
      );
      fromEnv.destroy();
      expect(out.Entries?.[0]?.SuccessCode).toBe('PUBLISHED');
      expect(bus.events).toHaveLength(1);
    } finally {
      if (previous === undefined) delete process.env[EVENTSV2_ENDPOINT_ENV];
      else process.env[EVENTSV2_ENDPOINT_ENV] = previous;
    }
  });

  it('answers a DeduplicationId seen within 5 minutes DEDUPLICATED and does not deliver it again', async () => {
    const first = await client.send(
      new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: [entry('a', 1)] }),
    );
    const again = await client.send(
      new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: [entry('a', 1), entry('a', 2)] }),
    );
    expect(again.Entries?.map((e) => e.SuccessCode)).toEqual(['DEDUPLICATED', 'PUBLISHED']);
    // The duplicate is answered with the first acceptance's id and sequence number.
    expect(again.Entries?.[0]?.EventId).toBe(first.Entries?.[0]?.EventId);
    expect(again.Entries?.[0]?.SequenceNumber).toBe('1');
    expect(bus.events.map((e) => e.deduplicationId)).toEqual(['a-1', 'a-2']);
    expect(bus.stats.deduplicated).toBe(1);
    expect(DEDUP_WINDOW_MS).toBe(300_000);
  });

  it('scopes deduplication to account + EventGroupId + DeduplicationId, not to the bus', async () => {
    const OTHER_BUS = 'arn:aws:events:eu-west-1:123456789012:event-busv2/audit/def456';
    const OTHER_ACCOUNT = 'arn:aws:events:eu-west-1:210987654321:event-busv2/orders/abc123';
    const put = (EventBusArn: string, e: EventsV2PutEventsRequestEntry) =>
      client.send(new EventsV2PutEventsCommand({ EventBusArn, Entries: [e] }));
    const codes = [
      (await put(ARN, entry('a', 1, 'same'))).Entries?.[0]?.SuccessCode,
      // The same id in another group of the same account is another event.
      (await put(ARN, entry('b', 1, 'same'))).Entries?.[0]?.SuccessCode,
      // The same group and id on another bus of the same account is the same event.
      (await put(OTHER_BUS, entry('a', 2, 'same'))).Entries?.[0]?.SuccessCode,
      // In another account, it is another event.
      (await put(OTHER_ACCOUNT, entry('a', 3, 'same'))).Entries?.[0]?.SuccessCode,
    ];
    expect(codes).toEqual(['PUBLISHED', 'PUBLISHED', 'DEDUPLICATED', 'PUBLISHED']);
    expect(bus.events.map((e) => [e.eventBusName, e.eventGroupId])).toEqual([
      [ARN, 'a'],
      [ARN, 'b'],
      [OTHER_ACCOUNT, 'a'],
    ]);
    expect(bus.stats.deduplicated).toBe(1);
  });

  it('takes up to 100 entries and refuses 101 as a whole (InvalidInputException, HTTP 400)', async () => {
    const hundred = Array.from({ length: 100 }, (_, i) => entry('big', i + 1));
    const out = await client.send(new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: hundred }));
    expect(out.FailedEntryCount).toBe(0);
    expect(bus.events).toHaveLength(100);
    const error = await client
      .send(new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: [...hundred, entry('big', 101)] }))
      .catch((e: unknown) => e as { name: string; $metadata: { httpStatusCode: number } });
    expect(error).toMatchObject({ name: 'InvalidInputException', $metadata: { httpStatusCode: 400 } });
    expect(bus.events).toHaveLength(100);
  });

  it('refuses per entry a DeduplicationId over 128 characters and a Detail that is not a JSON object', async () => {
    const out = await client.send(
      new EventsV2PutEventsCommand({
        EventBusArn: ARN,
        Entries: [
          entry('a', 1, 'x'.repeat(MAX_DEDUPLICATION_ID_LENGTH + 1)),
          { ...entry('a', 2), Detail: '[1]' },
          entry('a', 3, 'x'.repeat(MAX_DEDUPLICATION_ID_LENGTH)),
        ],
      }),
    );
    expect(out.FailedEntryCount).toBe(2);
    expect(out.Entries?.map((e) => e.ErrorCode ?? e.SuccessCode)).toEqual([
      'InvalidArgument',
      'MalformedDetail',
      'PUBLISHED',
    ]);
    expect(bus.events.map((e) => e.detail.n)).toEqual([3]);
  });

  it('refuses a bus that is not a Custom Event Bus ARN', async () => {
    const error = await client
      .send(new EventsV2PutEventsCommand({ EventBusArn: 'orders', Entries: [entry('a', 1)] }))
      .catch((e: unknown) => e as { name: string });
    expect(error).toMatchObject({ name: 'InvalidInputException' });
    expect(bus.events).toHaveLength(0);
  });

  it('injects throttling (429), server errors (500), per-entry failures and lost responses', async () => {
    bus.setFaults({ throttleRate: 1 });
    const throttled = await client
      .send(new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: [entry('a', 1)] }))
      .catch((e: unknown) => e as { name: string; $metadata: { httpStatusCode: number } });
    expect(throttled).toMatchObject({ name: 'ThrottlingException', $metadata: { httpStatusCode: 429 } });

    bus.setFaults({ serverErrorRate: 1 });
    const failed = await client
      .send(new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: [entry('a', 1)] }))
      .catch((e: unknown) => e as { name: string; $metadata: { httpStatusCode: number } });
    expect(failed).toMatchObject({ name: 'InternalException', $metadata: { httpStatusCode: 500 } });
    expect(bus.events).toHaveLength(0);

    bus.setFaults({ entryFailureRate: 1, entryFailureCode: 'ThrottlingException' });
    const perEntry = await client.send(
      new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: [entry('a', 1)] }),
    );
    expect(perEntry.Entries?.[0]?.ErrorCode).toBe('ThrottlingException');
    expect(bus.events).toHaveLength(0);

    bus.setFaults({ lostResponseRate: 1 });
    const lost = await client
      .send(new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: [entry('a', 1)] }))
      .catch((e: unknown) => e as Error);
    expect(lost).toBeInstanceOf(Error);
    expect(bus.events.map((e) => [e.deduplicationId, e.responseLost])).toEqual([['a-1', true]]);

    // The sender re-sends after the lost answer: the bus drops it as a duplicate.
    bus.setFaults({});
    const resent = await client.send(
      new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: [entry('a', 1)] }),
    );
    expect(resent.Entries?.[0]?.SuccessCode).toBe('DEDUPLICATED');
    expect(bus.events).toHaveLength(1);
  });

  it('the SDK retries a throttled call inside one send (maxAttempts)', async () => {
    const retrying = new EventsV2Client({
      region: 'eu-west-1',
      credentials,
      endpoint: bus.url,
      maxAttempts: 3,
    });
    bus.setFaults({ throttleRate: 0.5 });
    const outs = [];
    for (let i = 1; i <= 6; i++) {
      outs.push(
        await retrying
          .send(new EventsV2PutEventsCommand({ EventBusArn: ARN, Entries: [entry('r', i)] }))
          .then((o) => o.$metadata.attempts ?? 1)
          .catch(() => 0),
      );
    }
    retrying.destroy();
    expect(bus.stats.throttled).toBeGreaterThan(0);
    // Some call needed more than one attempt and still succeeded.
    expect(outs.some((attempts) => attempts > 1)).toBe(true);
  });

  it('still answers the classic PutEvents (AWS JSON 1.1) on the same port', async () => {
    const { EventBridgeClient, PutEventsCommand } = await import('@aws-sdk/client-eventbridge');
    const classic = new EventBridgeClient({ region: 'eu-west-1', credentials, endpoint: bus.url });
    const out = await classic.send(
      new PutEventsCommand({ Entries: [{ Source: 's', DetailType: 'd', Detail: '{}', EventBusName: 'b' }] }),
    );
    classic.destroy();
    expect(out.FailedEntryCount).toBe(0);
    expect(bus.events.map((e) => [e.eventBusName, e.eventGroupId])).toEqual([['b', undefined]]);
  });
});
