// The team's event types, declared once with the producer package and imported by the producer,
// the consumers' handlers and their CDK wiring alike. zod/mini keeps a consumer's bundle small.
import { defineEvent } from 'outbox-relay-aws';
import * as z from 'zod/mini';

export const OrderPlaced = defineEvent({
  type: 'OrderPlaced',
  source: 'shop.orders',
  schema: z.object({ orderId: z.string(), total: z.number().check(z.nonnegative()) }),
});

export const OrderShipped = defineEvent({
  type: 'OrderShipped',
  source: 'shop.warehouse',
  schema: z.object({ orderId: z.string(), carrier: z.string() }),
});
