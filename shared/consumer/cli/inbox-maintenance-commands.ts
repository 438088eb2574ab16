/**
 * `outbox inbox prune` and `outbox inbox metrics`: for a consumer whose inbox lives in a database
 * of its own, where no monitor prunes it or counts its parked events
 * (docs/consumer-operations.md#a-consumer-in-its-own-database). Both touch only the `inbox_*` tables, with
 * the monitor role's grants (`outbox_monitor`).
 */
import { type Command, InvalidArgumentError } from 'commander';
import type { OperationsContext } from '../../platform/cli/program.ts';
import { loadMonitorSettings } from '../../platform/config.ts';
import { DEFAULT_METRIC_NAMESPACE, EnvVar } from '../../platform/names.ts';
import { countParked, inboxParkedEmf, pruneInbox } from '../operations/index.ts';

/** Seconds in a day. */
const DAY_SECONDS = 86_400;

/** Days of retention: a number from 2 to 3650, the range of OUTBOX_INBOX_RETENTION_DAYS. */
function retentionDays(value: string): number {
  const days = Number(value.trim());
  if (value.trim() === '' || !Number.isFinite(days) || days < 2 || days > 3_650) {
    throw new InvalidArgumentError('It must be a number of days from 2 to 3650.');
  }
  return days;
}

/** The consumer names of a repeated `--consumer`. */
const collect = (value: string, previous: string[] = []) => {
  if (value.trim() === '') throw new InvalidArgumentError('It must name a consumer.');
  return [...previous, value];
};

/** Adds `prune` and `metrics` to `inbox` (the `outbox inbox` command, or the `outbox-inbox` program). */
export function registerInboxMaintenance(inbox: Command, ctx: OperationsContext): void {
  inbox
    .command('prune')
    .description(
      "delete the inbox's expired rows in this database, as the monitor does in the outbox's: records past the retention (never a parked one), then wait-for-gap rows untouched for as long (a chain's order state is kept)",
    )
    .option(
      '--retention-days <days>',
      `keep this many days (default: $${EnvVar.inboxRetentionDays}, else 30); above the on-failure destination's retention`,
      retentionDays,
    )
    .option('--dry-run', 'count what would be deleted, delete nothing')
    .option('--json', 'print one JSON document with the counts')
    .action(async (o: { retentionDays?: number; dryRun?: boolean; json?: boolean }) => {
      const s = loadMonitorSettings(ctx.env);
      const retentionSeconds =
        o.retentionDays === undefined ? s.inboxRetentionSeconds : o.retentionDays * DAY_SECONDS;
      await ctx.withDb(async (sql) => {
        const r = await pruneInbox(sql, {
          retentionSeconds,
          batchSize: s.pruneBatchSize,
          timeBudgetMs: s.pruneTimeBudgetMs,
          dryRun: o.dryRun,
        });
        if (o.json) {
          ctx.json({ ...r, retentionDays: retentionSeconds / DAY_SECONDS });
          return;
        }
        const days = retentionSeconds / DAY_SECONDS;
        if (r.dryRun) {
          const e = r.expired ?? { messages: 0, chains: 0, gaps: 0, failures: 0 };
          ctx.out(
            `would delete ${e.messages} inbox record(s), ${e.chains} superseded per-source chain state(s), ${e.gaps} wait-for-gap row(s) and ${e.failures} failure trace(s) older than ${days} day(s)`,
          );
        } else
          ctx.out(
            `deleted ${r.deleted} inbox row(s) older than ${days} day(s) in ${r.batches.length} batch(es), ${r.durationMs} ms${r.complete ? '' : ' (time budget spent; run again to continue)'}`,
          );
      });
    });

  inbox
    .command('metrics')
    .description(
      "print each consumer's InboxParkedCount as CloudWatch Embedded Metric Format, one JSON line each, for a log stream CloudWatch reads (a scheduled task's stdout)",
    )
    .requiredOption(
      '--consumer <name>',
      'a consumer (its inbox `consumer` option); repeat for several',
      collect,
    )
    .option(
      '--namespace <namespace>',
      `CloudWatch namespace (default: $${EnvVar.metricNamespace}, else ${DEFAULT_METRIC_NAMESPACE})`,
    )
    .option('--json', 'print one JSON document instead: [{"consumer", "parked"}]')
    .action(async (o: { consumer: string[]; namespace?: string; json?: boolean }) => {
      const namespace = o.namespace ?? ctx.env[EnvVar.metricNamespace] ?? DEFAULT_METRIC_NAMESPACE;
      await ctx.withDb(async (sql) => {
        const counts = await countParked(sql, o.consumer);
        if (o.json) {
          ctx.json(counts);
          return;
        }
        for (const line of inboxParkedEmf(counts, namespace)) ctx.out(line);
        ctx.err(`inbox metrics: ${counts.map((c) => `${c.consumer} ${c.parked} parked`).join(', ')}`);
      });
    });
}
