/** Monitor Lambda entry point; configuration is validated at cold start. */
import { connect, loadMonitorSettings, ServiceName } from '../../shared/platform/index.ts';
import { createMonitorHandler } from './monitor-handler.ts';

/** The monitor Lambda's handler (see monitor-handler.ts). */
export const handler = createMonitorHandler({
  settings: loadMonitorSettings(),
  sql: connect({ applicationName: ServiceName.monitor, max: 2 }),
});
