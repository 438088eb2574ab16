/**
 * The rehearsal's producer: a service that uses the library's producer API, connected as the
 * producer role through the proxy stand-in with an IAM token and verified TLS (the CA handed over
 * in NODE_EXTRA_CA_CERTS), as a producer service in AWS would be. Commits `--events` events over
 * `--aggregates` aggregates, some of them OrderPlaced for the example consumer, and prints what it
 * committed as one JSON document.
 */
import { parseArgs } from 'node:util';
import { connect } from '../../shared/platform/index.ts';
import { enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '40' },
    aggregates: { type: 'string', default: '8' },
    batch: { type: 'string', default: '1' },
  },
});
const events = Number(values.events);
const aggregates = Number(values.aggregates);
const sql = connect({ max: 2 });
const committed: { eventId: string; aggregateId: string; sequence: string }[] = [];
try {
  for (let i = 0; i < events; i++) {
    const aggregateId = `rehearsal-${values.batch}-${i % aggregates}`;
    const orderPlaced = i < aggregates; // each aggregate's first event is an order being placed
    const event: OutboxEvent = orderPlaced
      ? {
          type: 'OrderPlaced',
          source: 'demo.shop',
          aggregateType: 'order',
          aggregateId,
          payload: { orderId: aggregateId, total: 10 + i },
        }
      : { type: 'OrderUpdated', source: 'demo.shop', aggregateType: 'order', aggregateId, payload: { n: i } };
    const [result] = await sql.begin((tx) => enqueueMany(tx, [event]));
    if (result) committed.push({ eventId: result.eventId, aggregateId, sequence: result.sequence });
  }
  process.stdout.write(`${JSON.stringify({ committed })}\n`);
} finally {
  await sql.end({ timeout: 5 });
}
