/**
 * Lambda entry point of the example billing consumer. It connects through RDS Proxy with IAM as its
 * own database role (`PGUSER`, `outbox_consumer` by default), like the relay and the monitor.
 */
import { ConnectionPool, connect } from '@outbox-relay-aws/consumer';
import { createBillingHandler } from './consumer.ts';

// A replaceable pool: an invocation that lost its connection leaves the next one a fresh pool.
export const handler = createBillingHandler(
  new ConnectionPool(() => connect({ applicationName: 'billing', max: 2 })),
);
