/** Monitor Lambda entry point; configuration is validated at cold start. */
import { LambdaClient } from '@aws-sdk/client-lambda';
import {
  connect,
  loadMonitorSettings,
  MONITOR_POOL_SIZE,
  OUTBOX_SEARCH_PATH,
  poolSize,
  ServiceName,
} from '../../shared/platform/index.ts';
import { createMonitorHandler } from './monitor-handler.ts';

const settings = loadMonitorSettings();

/** The monitor Lambda's handler (see monitor-handler.ts). */
export const handler = createMonitorHandler({
  settings,
  sql: connect({
    applicationName: ServiceName.monitor,
    max: poolSize(MONITOR_POOL_SIZE),
    searchPath: OUTBOX_SEARCH_PATH,
  }),
  // Only when it scales the relays out. Each Invoke (asynchronous: Lambda answers 202 once it has
  // queued the event) waits at most 2 s to connect and 3 s for the answer, twice at most.
  lambda: settings.scaleOut
    ? new LambdaClient({
        maxAttempts: 2,
        requestHandler: { connectionTimeout: 2_000, requestTimeout: 3_000, throwOnRequestTimeout: true },
      })
    : undefined,
});
