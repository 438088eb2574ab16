/**
 * Lambda entry point of the example billing consumer. It connects through RDS Proxy with IAM as its
 * own database role (`PGUSER`, `outbox_consumer` by default), like the relay and the monitor.
 */
import { connect } from '../../shared/platform/index.ts';
import { createBillingHandler } from './consumer.ts';

export const handler = createBillingHandler(connect({ applicationName: 'billing', max: 2 }));
