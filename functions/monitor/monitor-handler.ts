/**
 * The monitor Lambda's handler: prunes expired rows within its time budget, then emits the backlog
 * metrics (the oldest pending age is the health signal: it grows when the relay is dead). Built
 * from its dependencies so tests run it against a real database.
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
  getStatus,
  type OutboxStatus,
  type PruneResult,
  prune,
  type ScaleOutResult,
  startExtraRelays,
} from '../../shared/relay/operations/index.ts';

/** What one monitor invocation did. */
export interface MonitorSummary {
  status: OutboxStatus;
  prune: PruneResult | { error: string };
  /** The extra relays it started, when it scales the relays out (`settings.scaleOut`). */
  scaleOut?: ScaleOutResult;
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
/** Longest the monitor spends starting extra relays, ms (a few invocations, 500 ms apart). */
const SCALE_OUT_BUDGET_MS = 10_000;

/**
 * Builds the middy handler: prunes within min(OUTBOX_PRUNE_TIME_BUDGET_MS, remaining − 5 s), then
 * measures the backlog, starts the extra relays it asks for (`settings.scaleOut`: see
 * shared/relay/operations/scale-out.ts), and emits the backlog metrics even if pruning failed (and then
 * fails the invocation).
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
      const status = await getStatus(deps.sql, { includePublished: false });
      let scaleOut: ScaleOutResult | undefined;
      if (s.scaleOut && deps.lambda) {
        // The extras end by the time this invocation started plus forSeconds, so that they have
        // ended before the next minute's monitor starts its own (pruning took some of it).
        const forSeconds = Math.floor(s.scaleOut.forSeconds - (performance.now() - started) / 1000);
        const budgetMs = Math.min(SCALE_OUT_BUDGET_MS, context.getRemainingTimeInMillis() - MARGIN_MS);
        scaleOut = await startExtraRelays(
          deps.lambda,
          s.scaleOut,
          status.pending,
          forSeconds,
          AbortSignal.timeout(Math.max(0, budgetMs)),
        );
        if (scaleOut.errors.length > 0) logger.warn('extra relays not started', { scaleOut });
      }
      addMonitorMetrics(metrics, status, 'error' in pruned ? undefined : pruned, scaleOut);
      const summary: MonitorSummary = { status, prune: pruned, ...(scaleOut ? { scaleOut } : {}) };
      logger.info('monitor invocation finished', { summary });
      if ('error' in pruned) throw new Error(`pruning failed: ${pruned.error}`);
      return summary;
    });
}
