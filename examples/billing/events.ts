/** The event types of the demo shop, declared once for the producer and the consumers. */
import { defineEvent } from 'outbox-relay-aws';
// zod/mini: the consumer's Lambda bundle gets only the functions used (zod itself would add ~460 KiB).
import * as z from 'zod/mini';

export const OrderPlaced = defineEvent({
  type: 'OrderPlaced',
  source: 'demo.shop',
  schema: z.object({ orderId: z.string(), total: z.number().check(z.nonnegative()) }),
});
