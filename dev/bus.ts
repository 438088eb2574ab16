/**
 * `npm run bus [-- --refuse <text>]`: the local EventBridge endpoint on its own, for trying the CLI
 * or your own code. Port from LOCAL_BUS_PORT (default 4010). Prints each accepted event; Ctrl-C
 * stops it.
 *
 * `--refuse <text>` refuses every entry whose Detail holds the text with `InvalidArgument`, a
 * permanent error (the relay dead-letters the event at once), so that dead letters can be listed,
 * shown and replayed locally (see local-bus.ts, `Faults.poisonMarker`).
 */
import { parseArgs } from 'node:util';
import { onInterrupt } from '../shared/relay/cli/signals.ts';
import { type AcceptedEvent, startLocalBus } from './local-bus.ts';

const USAGE = `usage: npm run bus [-- --refuse <text>]

  --refuse <text>   refuse every event whose detail holds <text> with InvalidArgument, a permanent
                    error: the relay dead-letters it at once (to try outbox dead-letters locally)
  LOCAL_BUS_PORT    port to listen on (default 4010; 0 picks a free one)`;

let values: { refuse?: string; help?: boolean };
try {
  ({ values } = parseArgs({
    args: process.argv.slice(2),
    options: { refuse: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  }));
} catch (error) {
  process.stderr.write(`error: ${(error as Error).message}\n${USAGE}\n`);
  process.exit(2);
}
if (values.help) {
  process.stdout.write(`${USAGE}\n`);
  process.exit(0);
}

const bus = await startLocalBus({
  port: Number(process.env.LOCAL_BUS_PORT ?? 4010),
  faults: values.refuse === undefined ? {} : { poisonMarker: values.refuse, poisonCode: 'InvalidArgument' },
});
process.stdout.write(
  `local EventBridge endpoint listening on ${bus.url}\n` +
    // Everything `outbox relay` needs besides DATABASE_URL: the bus name is required (the local bus
    // takes any name and prints it with each event).
    `  export EVENT_BUS_NAME=demo AWS_ENDPOINT_URL_EVENTBRIDGE=${bus.url} AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local\n` +
    // The same port answers the Custom Event Bus's PutEvents (any event-busv2 ARN).
    `  or, for a Custom Event Bus: export OUTBOX_EVENT_BUS_ARN=arn:aws:events:us-east-1:000000000000:event-busv2/demo/local AWS_ENDPOINT_URL_EVENTBRIDGEV2=${bus.url} (instead of EVENT_BUS_NAME)\n` +
    (values.refuse === undefined
      ? ''
      : `  refusing every event whose detail holds ${JSON.stringify(values.refuse)} (InvalidArgument: dead-lettered at once)\n`),
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
