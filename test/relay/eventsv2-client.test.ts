/**
 * The EventsV2 client's request as it leaves the process, without a bus: the endpoint the SDK's
 * rules give (the account's host when the bus ARN names one), the RPC v2 CBOR path and headers, and
 * the SigV4 signature's service name. A middleware at the end of the stack records the signed
 * request and stops it there.
 */
import { describe, expect, it } from 'vitest';
import {
  EVENTSV2_SIGNING_NAME,
  EventsV2Client,
  EventsV2PutEventsCommand,
} from '../../shared/relay/buses/custom-event-bus-client.ts';

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
});
