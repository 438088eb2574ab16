/**
 * The EventsV2 client's request as it leaves the process, without a bus: the endpoint the SDK's
 * rules give (the account's host when the bus ARN names one), the RPC v2 CBOR path and headers, and
 * the SigV4 signature's service name. A middleware at the end of the stack records the signed
 * request and stops it there.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cbor } from '@smithy/core/cbor';
import { describe, expect, it } from 'vitest';
import {
  EVENTSV2_SIGNING_NAME,
  EventBridgeV2Client,
  EventBridgeV2ServiceException,
  EventsV2Client,
  EventsV2PutEventsCommand,
  EventsV2ServiceException,
  PutEventsCommand,
} from '../../shared/relay/buses/custom-event-bus-client.ts';
import { requestFailure } from '../../shared/relay/buses/publisher.ts';

type Sent = { hostname: string; path: string; headers: Record<string, string> };

async function requestFor(region: string, eventBusArn: string): Promise<Sent> {
  const client = new EventsV2Client({
    region,
    credentials: { accessKeyId: 'AKID', secretAccessKey: 'secret' },
  });
  let sent: Sent | undefined;
  client.middlewareStack.add(
    (() => async (args: { request: Sent }) => {
      sent = args.request;
      throw new Error('stopped before the network');
    }) as never,
    { step: 'finalizeRequest', name: 'captureSignedRequest', priority: 'low' },
  );
  await expect(
    client.send(
      new EventsV2PutEventsCommand({ EventBusArn: eventBusArn, Entries: [{ Source: 's', DetailType: 'd' }] }),
    ),
  ).rejects.toThrow('stopped before the network');
  client.destroy();
  if (!sent) throw new Error('no request was built');
  return sent;
}

describe('the EventsV2 client', () => {
  it('signs a PutEvents request for service events and posts it to the RPC v2 CBOR path of the account endpoint', async () => {
    const sent = await requestFor(
      'eu-west-1',
      'arn:aws:events:eu-west-1:123456789012:event-busv2/orders/abc',
    );
    expect(sent.hostname).toBe('123456789012.eventsv2.eu-west-1.amazonaws.com');
    expect(sent.path).toBe('/service/AWSEventsV2/operation/PutEvents');
    expect(sent.headers['smithy-protocol']).toBe('rpc-v2-cbor');
    expect(sent.headers['content-type']).toBe('application/cbor');
    expect(sent.headers.authorization).toMatch(
      new RegExp(
        `^AWS4-HMAC-SHA256 Credential=AKID/\\d{8}/eu-west-1/${EVENTSV2_SIGNING_NAME}/aws4_request, `,
      ),
    );
  });

  it("uses the region's endpoint, in the region's partition, when the ARN names no account", async () => {
    expect((await requestFor('eu-west-1', 'orders')).hostname).toBe('eventsv2.eu-west-1.amazonaws.com');
    expect((await requestFor('cn-north-1', 'orders')).hostname).toBe('eventsv2.cn-north-1.amazonaws.com.cn');
  });

  it("exports the official client's names, so switching to @aws-sdk/client-eventbridgev2 is one import", () => {
    expect(EventBridgeV2Client).toBe(EventsV2Client);
    expect(PutEventsCommand).toBe(EventsV2PutEventsCommand);
    expect(EventBridgeV2ServiceException).toBe(EventsV2ServiceException);
  });
});

/** A loopback server answering every PutEvents with one RPC v2 CBOR error, counting the calls. */
async function answering(status: number, type: string) {
  let calls = 0;
  const server = createServer((req, res) => {
    calls++;
    req.resume();
    req.on('end', () => {
      const body = cbor.serialize({ __type: `com.amazonaws.eventbridgev2#${type}`, message: `${type} here` });
      res.writeHead(status, { 'content-type': 'application/cbor', 'smithy-protocol': 'rpc-v2-cbor' });
      res.end(body);
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return { url, calls: () => calls, close: () => new Promise((r) => server.close(r)) };
}

async function failureOf(status: number, type: string) {
  const server = await answering(status, type);
  const client = new EventsV2Client({
    region: 'eu-west-1',
    endpoint: server.url,
    maxAttempts: 1,
    credentials: { accessKeyId: 'AKID', secretAccessKey: 'secret' },
  });
  try {
    const input = {
      EventBusArn: 'arn:aws:events:eu-west-1:123456789012:event-busv2/orders/abc',
      Entries: [{ Source: 's', DetailType: 'd', Detail: '{}' }],
    };
    const error = await client.send(new EventsV2PutEventsCommand(input)).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(server.calls()).toBe(1);
    return error as EventsV2ServiceException & { $metadata: { httpStatusCode?: number } };
  } finally {
    client.destroy();
    await server.close();
  }
}

describe("the EventsV2 client's errors (PutEvents' error list in the model)", () => {
  it('decodes InvalidStateException (HTTP 409, a bus still being created) by name; the relay waits it out as back-pressure', async () => {
    const error = await failureOf(409, 'InvalidStateException');
    expect(error).toBeInstanceOf(EventsV2ServiceException);
    expect(error.name).toBe('InvalidStateException');
    expect(error.$fault).toBe('client');
    expect(error.$metadata.httpStatusCode).toBe(409);
    const outcome = requestFailure(error);
    expect(outcome).toMatchObject({ ok: false, code: 'InvalidStateException', permanent: false });
    expect(outcome.ok === false && outcome.backPressure).toBe(true);
  });

  it('another 4xx (AccessDeniedException) still counts towards a dead letter', async () => {
    const error = await failureOf(403, 'AccessDeniedException');
    expect(error.name).toBe('AccessDeniedException');
    const outcome = requestFailure(error);
    expect(outcome.ok === false && outcome.backPressure).toBe(false);
  });

  it('has no modelled LimitExceededException: PutEvents never returns it, so none is registered', async () => {
    const error = await failureOf(400, 'LimitExceededException');
    // Unregistered, it still arrives with its name, as the synthetic base exception.
    expect(error).toBeInstanceOf(EventsV2ServiceException);
    expect(error.name).toBe('LimitExceededException');
    expect(Object.getPrototypeOf(error).constructor).toBe(EventsV2ServiceException);
    const invalidState = await failureOf(409, 'InvalidStateException');
    expect(Object.getPrototypeOf(invalidState).constructor).not.toBe(EventsV2ServiceException);
  });
});
