// The notifications consumer's Lambda (queue topology: SQS batches with partial batch
// responses), bundled by OutboxConsumer from this file.
import { ConnectionPool, connect, inbox, sqsBatch } from '@outbox-relay-aws/consumer';
import { OrderShipped } from './consumer-events.ts';

export const handler = sqsBatch(
  inbox(
    {
      sql: new ConnectionPool(() => connect({ applicationName: 'notifications', max: 2 })),
      consumer: 'notifications',
      types: [OrderShipped.type],
      schema: OrderShipped.schema,
    },
    async (_event, { inbox: { tx, data } }) => {
      await tx`insert into shipment_notice (order_id, carrier) values (${data.orderId}, ${data.carrier})`;
    },
  ),
);
