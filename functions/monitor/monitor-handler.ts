/**
 * The monitor Lambda's handler: starts extra relays for claimable work, prunes expired rows within
 * its time budget, then emits the backlog metrics (the oldest pending age is the health signal:
 * it grows when the relay is dead). Built from its dependencies so tests run it against a real
 * database.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import type { Metrics } from '@aws-lambda-powertools/metrics';
import { logMetrics } from '@aws-lambda-powertools/metrics/middleware';
import type { LambdaClient } from '@aws-sdk/client-lambda';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import type { MonitorSettings, Sql } from '../../shared/platform/index.ts';
import { ServiceName } from '../../shared/platform/index.ts';
import {
  addMonitorMetrics,
  createMetrics,
  enqueueHeartbeat,
  getStatus,
  type HeartbeatResult,
  measureClaimable,
  type OutboxStatus,
  type PruneResult,
  prune,
  type ScaleOutResult,
  startExtraRelays,
} from '../../shared/relay/operations/index.ts';

/** What one monitor invocation did. */
export interface MonitorSummary {
  status: OutboxStatus | { error: string };
  prune: PruneResult | { error: string };
  /** The extra relays it started, when it scales the relays out (`settings.scaleOut`). */
  scaleOut?: ScaleOutResult | { error: string };
  /** This interval's heartbeat, when it sends them (`settings.heartbeatIntervalSeconds`). */
  heartbeat?: HeartbeatResult | { error: string };
}

/** Dependencies of the monitor handler, created once per cold start. */
export interface MonitorHandlerDeps {
  sql: Sql;
  settings: MonitorSettings;
  /** Invokes the relay function to scale out; required for `settings.scaleOut` to take effect. */
  lambda?: LambdaClient;
  logger?: Logger;
  metrics?: Metrics;
}

/** Time kept back at the end of an invocation for the metrics, ms. */
const MARGIN_MS = 5_000;
/**
 * Longest the monitor spends starting extra relays, ms: their spread (SCALE_OUT_STAGGER_MS apart,
 * 9.8 s for `maxRelays` 100) and the last invocation's answer.
 */
const SCALE_OUT_BUDGET_MS = 15_000;

/**
 * Builds the middy handler: starts the extra relays the claimable work asks for (`settings.scaleOut`:
 * see shared/relay/operations/scale-out.ts), prunes within min(OUTBOX_PRUNE_TIME_BUDGET_MS,
 * remaining − 5 s), then measures the backlog and emits the metrics. Each step runs
 * even if an earlier one failed (a status statement that times out on a huge backlog costs neither
 * the scale-out nor the pruning figures); the invocation then fails, naming what failed.
 */
export function createMonitorHandler(deps: MonitorHandlerDeps) {
  const logger = deps.logger ?? new Logger({ serviceName: ServiceName.monitor });
  const metrics = deps.metrics ?? createMetrics(ServiceName.monitor, deps.settings.metricNamespace);
  return middy<unknown, MonitorSummary, Error, Context>()
    .use(injectLambdaContext(logger))
    .use(logMetrics(metrics))
    .handler(async (_event, context) => {
      const started = performance.now();
      const s = deps.settings;
      let scaleOut: ScaleOutResult | { error: string } | undefined;
      if (s.scaleOut && deps.lambda) {
        try {
          // First, before pruning (up to its time budget, 20 s by default, on a large published
          // history) and the status: a backlog gets its relays as soon as the monitor runs.
          // Bounded by maxRelays, unlike the status below, so that a backlog too large to count in
          // time still gets its relays. The extras end by the time this invocation started plus
          // forSeconds, before the next minute's monitor starts its own.
          const work = await measureClaimable(deps.sql, s.scaleOut);
          const budgetMs = Math.min(SCALE_OUT_BUDGET_MS, context.getRemainingTimeInMillis() - MARGIN_MS);
          scaleOut = await startExtraRelays(
            deps.lambda,
            s.scaleOut,
            work,
            started + s.scaleOut.forSeconds * 1000,
            AbortSignal.timeout(Math.max(0, budgetMs)),
          );
          if (scaleOut.errors.length > 0) logger.warn('extra relays not started', { scaleOut });
        } catch (error) {
          logger.error('scale-out failed', { error });
          scaleOut = { error: (error as Error).message };
        }
      }
      let pruned: PruneResult | { error: string };
      try {
        pruned = await prune(deps.sql, {
          publishedRetentionSeconds: s.publishedRetentionSeconds,
          deadLetterRetentionSeconds: s.deadLetterRetentionSeconds,
          inboxRetentionSeconds: s.inboxRetentionSeconds,
          idempotencyKeyRetentionSeconds: s.idempotencyKeyRetentionSeconds,
          batchSize: s.pruneBatchSize,
          timeBudgetMs: Math.max(
            0,
            Math.min(s.pruneTimeBudgetMs, context.getRemainingTimeInMillis() - MARGIN_MS),
          ),
        });
      } catch (error) {
        // A failed prune must not cost us the lag metric: log it, emit the rest, fail afterwards.
        logger.error('pruning failed', { error });
        pruned = { error: (error as Error).message };
      }
      // The heartbeat before the status, so that a status that times out does not cost it: a
      // missing heartbeat pages every consumer (docs/observe.md#the-heartbeat).
      let heartbeat: HeartbeatResult | { error: string } | undefined;
      if (s.heartbeatIntervalSeconds !== undefined) {
        try {
          heartbeat = await enqueueHeartbeat(deps.sql, s.heartbeatIntervalSeconds);
        } catch (error) {
          logger.error('heartbeat failed', { error });
          heartbeat = { error: (error as Error).message };
        }
      }
      let status: OutboxStatus | { error: string };
      try {
        status = await getStatus(deps.sql, { includePublished: false });
      } catch (error) {
        logger.error('status failed', { error });
        status = { error: (error as Error).message };
      }
      addMonitorMetrics(
        metrics,
        'error' in status ? undefined : status,
        'error' in pruned ? undefined : pruned,
        scaleOut && !('error' in scaleOut) ? scaleOut : undefined,
      );
      const summary: MonitorSummary = {
        status,
        prune: pruned,
        ...(scaleOut ? { scaleOut } : {}),
        ...(heartbeat ? { heartbeat } : {}),
      };
      logger.info('monitor invocation finished', { summary });
      const failed = Object.entries({
        pruning: pruned,
        status,
        'scale-out': scaleOut ?? {},
        heartbeat: heartbeat ?? {},
      }).flatMap(([step, r]) => ('error' in r ? [`${step} failed: ${r.error}`] : []));
      if (failed.length > 0) throw new Error(failed.join('; '));
      return summary;
    });
}
