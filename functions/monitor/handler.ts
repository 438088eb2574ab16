/** Monitor Lambda entry point; configuration is validated at cold start. */
import { loadMonitorSettings } from '../../shared/config.ts';
import { connect } from '../../shared/db.ts';
import { createMonitorHandler } from './monitor-handler.ts';

/** The monitor Lambda's handler (see monitor-handler.ts). */
export const handler = createMonitorHandler({
  settings: loadMonitorSettings(),
  sql: connect({ applicationName: 'outbox-monitor', max: 2 }),
});
