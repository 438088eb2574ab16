import { createServer, type IncomingHttpHeaders } from 'node:http';
import type { AddressInfo } from 'node:net';
import { PutEventsCommand } from '@aws-sdk/client-eventbridge';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createEventBridgeClient } from '../../shared/relay/buses/classic-bus.ts';

describe('the EventBridge client', () => {
  const seen: IncomingHttpHeaders[] = [];
  const server = createServer((req, res) => {
    seen.push(req.headers);
    req.resume();
    req.on('end', () => {
      res.writeHead(200, { 'content-type': 'application/x-amz-json-1.1' });
      res.end(JSON.stringify({ FailedEntryCount: 0, Entries: [{ EventId: 'e-1' }] }));
    });
  });
  let endpoint = '';
  beforeAll(async () => {
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(() => new Promise<void>((resolve) => server.close(() => resolve())));

  it('sends signed PutEvents requests without the per-request user-agent header', async () => {
    const client = createEventBridgeClient({
      endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'AKIDEXAMPLE', secretAccessKey: 'secret' },
    });
    const out = await client.send(
      new PutEventsCommand({
        Entries: [{ EventBusName: 'bus', Source: 'orders', DetailType: 'OrderPlaced', Detail: '{"a":1}' }],
      }),
    );

    expect(out.Entries?.[0]?.EventId).toBe('e-1');
    const headers = seen.at(-1) ?? {};
    expect(headers['x-amz-target']).toBe('AWSEvents.PutEvents');
    expect(headers.authorization).toMatch(
      /^AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE\/\d{8}\/us-east-1\/events\//,
    );
    expect(headers['x-amz-user-agent']).toBeUndefined();
    expect(headers['user-agent']).toBeUndefined();
    client.destroy();
  });
});
