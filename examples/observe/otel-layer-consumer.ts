// otel-layer-consumer.ts: a consumer traced by the OpenTelemetry Lambda layer. The layer registers
// its tracer provider globally before this module loads and wraps the handler in an invocation
// span; the one line the trace needs here is `tracing: inboxTracing` (docs/observe.md).

import { ConnectionPool, connect, inbox } from '@outbox-relay-aws/consumer';
import { inboxTracing } from '@outbox-relay-aws/consumer/otel';

export const pool = new ConnectionPool(() => connect({ applicationName: 'billing', max: 1 }));

export const handler = inbox(
  { sql: pool, consumer: 'billing', tracing: inboxTracing },
  async (_event, { inbox }) => {
    // Spans started here are children of the inbox's span, in the same trace.
    await inbox.tx`insert into invoices (event_id) values (${inbox.metadata.eventId})`;
    return { invoiced: inbox.metadata.eventId };
  },
);
