/** Lambda entry point of the example billing consumer (connects through RDS Proxy with IAM, like the relay). */
import { connect } from '../../shared/platform/index.ts';
import { createBillingHandler } from './consumer.ts';

export const handler = createBillingHandler(connect({ applicationName: 'billing', max: 2 }));
