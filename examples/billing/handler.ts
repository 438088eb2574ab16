/**
 * Lambda entry point of the example billing consumer. It connects through RDS Proxy with IAM as its
 * own database role (`PGUSER`, `outbox_consumer` by default), like the relay and the monitor.
 */
import { ConnectionPool, connect, sqsBatch } from '@outbox-relay-aws/consumer';
import { createBillingHandler } from './consumer.ts';

// A replaceable pool: an invocation that lost its connection leaves the next one a fresh pool.
// sqsBatch serves both topologies: a batch of SQS messages (topology 'queue', with partial batch
// responses), or one EventBridge event passed straight to the inbox (topology 'direct', and the
// replay commands).
export const handler = sqsBatch(
  createBillingHandler(new ConnectionPool(() => connect({ applicationName: 'billing', max: 2 }))),
);
