/**
 * The relay Lambda's handler, built from its dependencies so tests can run it against a real
 * database and a local bus. The deployed entry point (`handler.ts`) builds it once per cold start.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import type { Metrics } from '@aws-lambda-powertools/metrics';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { addRelayMetrics, createMetrics, readRelayEvent } from '../../shared/operations/index.ts';
import type { ConnectionPool, RelaySettings, Sql } from '../../shared/platform/index.ts';
import { ServiceName } from '../../shared/platform/index.ts';
import {
  AnswerTimeout,
  checkEventBridgeClient,
  type RelayCounts,
  runRelay,
  type StopReason,
  UnreturnedLeases,
} from '../../shared/relay/index.ts';

/** What one invocation did. */
export interface RelayInvocationSummary extends RelayCounts {
  passes: number;
  stopReason: StopReason;
  durationMs: number;
  /** An extra relay the monitor started (its payload asked for scale-out). */
  scaleOut?: boolean;
}

/** Dependencies of the relay handler, created once per cold start. */
export interface RelayHandlerDeps {
  /**
   * The database, kept across warm invocations. A {@link ConnectionPool} (`openPool`) lets the
   * relay replace connections that broke or stopped answering; a plain pool is used as it is.
   */
  sql: Sql | ConnectionPool;
  client: EventBridgeClient;
  settings: RelaySettings;
  logger?: Logger;
  metrics?: Metrics;
}

/**
 * Builds the middy handler: relays until close to the invocation's deadline (each pass returns
 * before it, and its lease is capped to the remaining time), then returns a summary. Overlapping
 * invocations are safe: they split the work through leases. Rows of a pass that failed on the
 * database and could not be handed back before the invocation ended are handed back by the next
 * warm invocation.
 *
 * The payload: EventBridge Scheduler's (`{}`) relays until the deadline; the monitor's
 * `{ "scaleOut": { "forSeconds": n } }` (an extra relay, shared/operations/scale-out.ts) relays
 * until nothing is pending, n seconds at most. A malformed one fails the invocation with an
 * `OutboxValidationError` naming the field, before anything is claimed.
 */
export function createRelayHandler(deps: RelayHandlerDeps) {
  const logger = deps.logger ?? new Logger({ serviceName: ServiceName.relay });
  const metrics = deps.metrics ?? createMetrics(ServiceName.relay, deps.settings.metricNamespace);
  let clientChecked: Promise<void> | undefined;
  const unreturned = new UnreturnedLeases();
  // Kept across warm invocations: a slow bus is learned once, not again every minute.
  const answerTimeout = new AnswerTimeout();
  return middy<unknown, RelayInvocationSummary, Error, Context>()
    .use(injectLambdaContext(logger))
    .use(logMetrics(metrics))
    .handler(async (event, context) => {
      const started = performance.now();
      const request = readRelayEvent(event);
      clientChecked ??= checkEventBridgeClient(deps.client);
      await clientChecked;
      const until = request.scaleOutForMs === undefined ? undefined : started + request.scaleOutForMs;
      const result = await runRelay({
        sql: deps.sql,
        client: deps.client,
        settings: deps.settings,
        untilEmpty: until !== undefined,
        remainingMs: () =>
          until === undefined
            ? context.getRemainingTimeInMillis()
            : Math.min(context.getRemainingTimeInMillis(), until - performance.now()),
        unreturned,
        answerTimeout,
        onTransientError: (error, consecutive) =>
          logger.warn('database unavailable, retrying', { error, consecutive }),
      });
      addRelayMetrics(metrics, result);
      const summary: RelayInvocationSummary = {
        ...result,
        durationMs: Math.round(performance.now() - started),
        ...(until === undefined ? {} : { scaleOut: true }),
      };
      logger.info('relay invocation finished', { summary });
      return summary;
    });
}
