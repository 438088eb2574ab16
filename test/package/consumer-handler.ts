// The billing consumer's Lambda (direct topology: one event per invocation), bundled by
// OutboxConsumer from this file. It logs in as its own role with the settings the construct
// gives the function (PGHOST, PGUSER, the inbox's retry window…).
import { ConnectionPool, connect, inbox } from '@outbox-relay-aws/consumer';
import { OrderPlaced } from './consumer-events.ts';

export const handler = inbox(
  {
    sql: new ConnectionPool(() => connect({ applicationName: 'billing', max: 2 })),
    consumer: 'billing',
    types: [OrderPlaced.type],
    schema: OrderPlaced.schema,
  },
  async (_event, { inbox: { tx, data } }) => {
    await tx`insert into invoice (order_id, total) values (${data.orderId}, ${data.total})`;
    return { invoiced: data.orderId };
  },
);
