// handler.ts: the consumer's Lambda function, target of an EventBridge rule on OrderPlaced.

import { ConnectionPool, connect, defineEvent, inbox } from '@outbox-relay-aws/consumer';
import type { EventBridgeEvent } from 'aws-lambda';
// zod/mini rather than zod: the same schemas, 13 to 22 KiB of the bundle (by the checks used) instead of 443.
import * as z from 'zod/mini';

// Shared with the producer in a real service (the producer's enqueue validates against it too).
export const OrderPlaced = defineEvent({
  type: 'OrderPlaced',
  source: 'shop.orders',
  schema: z.object({ orderId: z.string(), total: z.number().check(z.nonnegative()) }),
});

// One pool per container, made at cold start. DATABASE_URL, or PGHOST/PGUSER/… (with
// OUTBOX_DB_IAM_AUTH=true for an IAM token). After an invocation that lost its connection, the
// next one gets a fresh pool.
export const pool = new ConnectionPool(() => connect({ applicationName: 'billing', max: 1 }));

export const handler = inbox(
  {
    sql: pool,
    consumer: 'billing',
    types: [OrderPlaced.type], // its rule delivers OrderPlaced only, one type of the order's events
    order: 'wait-for-gap',
    schema: OrderPlaced.schema, // inbox.data is typed and validated
  },
  async (_event: EventBridgeEvent<string, unknown>, { inbox }) => {
    // inbox.tx is the transaction the event is recorded in: this commits with the record, or not at all.
    await inbox.tx`insert into invoices ${inbox.tx({ order_id: inbox.data.orderId, total: inbox.data.total })}`;
    return { invoiced: inbox.data.orderId };
  },
);
