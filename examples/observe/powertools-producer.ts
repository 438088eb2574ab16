// powertools-producer.ts: a producer traced by Powertools Tracer (X-Ray, no OpenTelemetry). Its
// segments are in the function's X-Ray trace, whose header Lambda sets in _X_AMZN_TRACE_ID: passed
// as the event's traceHeader, the relay publishes it as EventBridge's TraceHeader and the envelope's
// metadata.traceparent, and the consumer's trace continues it (docs/observe.md).

import { enqueue } from 'outbox-relay-aws';
import type { Sql } from 'postgres';

export async function placeOrder(sql: Sql, orderId: string, total: number) {
  await sql.begin(async (tx) => {
    await tx`insert into orders (id, total) values (${orderId}, ${total})`;
    await enqueue(tx, {
      type: 'OrderPlaced',
      source: 'shop.orders',
      aggregateType: 'order',
      aggregateId: orderId,
      payload: { orderId, total },
      traceHeader: process.env._X_AMZN_TRACE_ID, // the Lambda's X-Ray trace, Powertools' segments in it
    });
  });
}
