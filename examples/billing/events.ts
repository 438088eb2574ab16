/** The event types of the demo shop, declared once for the producer and the consumers. */
import { z } from 'zod';
import { defineEvent } from '../../shared/producer/index.ts';

export const OrderPlaced = defineEvent({
  type: 'OrderPlaced',
  source: 'demo.shop',
  schema: z.object({ orderId: z.string(), total: z.number().nonnegative() }),
});
