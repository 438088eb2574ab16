/**
 * The relay Lambda's handler, built from its dependencies so tests can run it against a real
 * database and a local bus. The deployed entry point (`handler.ts`) builds it once per cold start.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import type { Metrics } from '@aws-lambda-powertools/metrics';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import { ServiceName } from '../../shared/platform/index.ts';
import {
  type FailureReason,
  FailureReasons,
  type Relay,
  type RelayCounts,
  type RelayFailure,
  type StopReason,
} from '../../shared/relay/index.ts';
import { addRelayMetrics, createMetrics, readRelayEvent } from '../../shared/relay/operations/index.ts';

/** What one invocation did. */
export interface RelayInvocationSummary extends RelayCounts {
  passes: number;
  stopReason: StopReason;
  durationMs: number;
  /** An extra relay the monitor started (its payload asked for scale-out). */
  scaleOut?: boolean;
  /**
   * Why events failed in this invocation, by reason (`ErrorCode: message`, as kept in
   * `last_error`), most frequent first, at most {@link FAILURE_REASONS_KEPT}; absent when none did.
   */
  failures?: FailureReason[];
}

/** Distinct failure reasons an invocation's summary lists, at most (the rest counted as `other reasons`). */
export const FAILURE_REASONS_KEPT = 10;

/** Dependencies of the relay handler, created once per cold start. */
export interface RelayHandlerDeps {
  /**
   * The relay (`createRelay`), kept across warm invocations with its pool, its learned answer
   * time and the leases a failed invocation could not hand back.
   */
  relay: Relay;
  logger?: Logger;
  metrics?: Metrics;
}

/**
 * Builds the middy handler: relays until close to the invocation's deadline (each pass returns
 * before it, and its lease is capped to the remaining time), or, in economy mode
 * (`OUTBOX_IDLE_RETURN_SECONDS` > 0), until it has claimed nothing for that long (`stopReason`
 * `idle`), then returns a summary. Overlapping
 * invocations are safe: they split the work through leases. Rows of a pass that failed on the
 * database and could not be handed back before the invocation ended are handed back by the next
 * warm invocation.
 *
 * The payload: EventBridge Scheduler's (`{}`) relays until the deadline; the monitor's
 * `{ "scaleOut": { "forSeconds": n } }` (an extra relay, shared/relay/operations/scale-out.ts) relays
 * until nothing is pending, n seconds at most. A malformed one fails the invocation with an
 * `OutboxValidationError` naming the field, before anything is claimed.
 */
export function createRelayHandler(deps: RelayHandlerDeps) {
  const { relay } = deps;
  const logger = deps.logger ?? new Logger({ serviceName: ServiceName.relay });
  const metrics = deps.metrics ?? createMetrics(ServiceName.relay, relay.settings.metricNamespace);
  const idleReturnMs =
    relay.settings.idleReturnSeconds > 0 ? relay.settings.idleReturnSeconds * 1000 : undefined;
  return middy<unknown, RelayInvocationSummary, Error, Context>()
    .use(injectLambdaContext(logger))
    .use(logMetrics(metrics))
    .handler(async (event, context) => {
      const started = performance.now();
      const request = readRelayEvent(event);
      // Each failure reason is logged when first seen in the invocation, and counted in the
      // summary: the relay's log says why events do not leave (an unreachable bus, a refused
      // entry), not only that they were retried (docs/operations.md#lag).
      const failures = new FailureReasons(FAILURE_REASONS_KEPT);
      const onFailure = (f: RelayFailure) => {
        const { totals, first } = failures.add(f);
        if (first) {
          logger.warn('publish failed', {
            reason: totals.reason,
            eventId: f.eventId,
            outcome: f.deadLettered ? 'dead-lettered' : 'will retry',
          });
        }
      };
      const until = request.scaleOutForMs === undefined ? undefined : started + request.scaleOutForMs;
      const result = await relay.run({
        untilEmpty: until !== undefined,
        // An extra relay returns once the outbox is drained; only the scheduled one idles.
        idleReturnMs: until === undefined ? idleReturnMs : undefined,
        remainingMs: () =>
          until === undefined
            ? context.getRemainingTimeInMillis()
            : Math.min(context.getRemainingTimeInMillis(), until - performance.now()),
        onTransientError: (error, consecutive) =>
          logger.warn('database unavailable, retrying', { error, consecutive }),
        onFailure,
      });
      addRelayMetrics(metrics, result);
      const failed = failures.list();
      const summary: RelayInvocationSummary = {
        ...result,
        durationMs: Math.round(performance.now() - started),
        ...(until === undefined ? {} : { scaleOut: true }),
        ...(failed.length === 0 ? {} : { failures: failed }),
      };
      logger.info('relay invocation finished', { summary });
      return summary;
    });
}
