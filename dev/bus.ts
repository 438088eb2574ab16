/**
 * `npm run bus`: the local EventBridge endpoint on its own, for trying the CLI or your own code.
 * Port from LOCAL_BUS_PORT (default 4010). Prints each accepted event; Ctrl-C stops it.
 */
import { onInterrupt } from '../cli/signals.ts';
import { type AcceptedEvent, startLocalBus } from './local-bus.ts';

const bus = await startLocalBus({ port: Number(process.env.LOCAL_BUS_PORT ?? 4010) });
process.stdout.write(
  `local EventBridge endpoint listening on ${bus.url}\n` +
    // Everything `outbox relay` needs besides DATABASE_URL: the bus name is required (the local bus
    // takes any name and prints it with each event).
    `  export EVENT_BUS_NAME=demo AWS_ENDPOINT_URL_EVENTBRIDGE=${bus.url} AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local\n`,
);
bus.emitter.on('accepted', (e: AcceptedEvent) => {
  process.stdout.write(
    `${new Date(e.receivedAt).toISOString()}  ${e.eventBusName ?? '-'}  ${e.source}  ${e.detailType}  ${JSON.stringify(e.detail)}\n`,
  );
});
// Ctrl-C (and the copy of it that npm forwards) closes the server and exits 0.
onInterrupt(
  () => void bus.close().then(() => process.exit(0)),
  () => process.exit(130),
);
