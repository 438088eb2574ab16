/**
 * `outbox counters advance --by <n>`: what an operator runs after a point-in-time restore of the
 * producer's database, before (or as soon as) producers write again
 * (docs/operations.md#after-a-point-in-time-restore). The database user must be allowed to update
 * `outbox_aggregate`: the schema's owner (the master user), not a deployment role.
 */
import type { Command } from 'commander';
import { EXIT } from '../../platform/cli/errors.ts';
import { positiveInteger } from '../../platform/cli/parsers.ts';
import type { OperationsContext } from '../../platform/cli/program.ts';
import { advanceCounters } from '../operations/index.ts';

/** Least time between two progress lines, ms. */
const PROGRESS_EVERY_MS = 1_000;

/** Adds `counters advance` to the program. */
export function registerCounters(program: Command, ctx: OperationsContext): void {
  program
    .command('counters')
    .description('the per-aggregate sequence counters (outbox_aggregate)')
    .command('advance')
    .description(
      "after a point-in-time restore: move every aggregate's counter (and typeSequence's) n further, so new events number above those published before the restore",
    )
    .requiredOption(
      '--by <n>',
      'how far: at least the events published after the restore point (the Published metric summed from then)',
      positiveInteger,
    )
    .option('--batch-size <n>', 'counters per transaction', positiveInteger, 1000)
    .option('--dry-run', 'count the counters and show the highest sequence, change nothing')
    .option('--yes', 'do not ask for confirmation')
    .option('--json', 'print one JSON document: {"by", "total", "advanced", "highestSequence", …}')
    .action(async (o: { by: number; batchSize: number; dryRun?: boolean; yes?: boolean; json?: boolean }) => {
      await ctx.withDb(async (sql) => {
        const plan = await advanceCounters(sql, { by: o.by, dryRun: true });
        const then = (BigInt(plan.highestSequence) + BigInt(plan.by)).toString();
        if (o.dryRun) {
          if (o.json) ctx.json(plan);
          else
            ctx.out(
              `would advance ${plan.total} counter(s) by ${plan.by}: the highest sequence now is ${plan.highestSequence}, then ${then}`,
            );
          return;
        }
        if (
          plan.total > 0 &&
          !o.yes &&
          !(await ctx.confirm(`Advance ${plan.total} counter(s) by ${plan.by}? [y/N] `))
        ) {
          ctx.err('not confirmed: nothing was changed (use --yes to advance them without asking)');
          ctx.setExitCode(EXIT.failure);
          return;
        }
        let lastProgressAt = performance.now();
        const r = await advanceCounters(sql, {
          by: o.by,
          batchSize: o.batchSize,
          progress: (p) => {
            const now = performance.now();
            if (p.advanced < p.total && now - lastProgressAt < PROGRESS_EVERY_MS && p.advanced > o.batchSize)
              return;
            lastProgressAt = now;
            ctx.err(`counters: advanced ${p.advanced} of ${p.total} counter(s)…`);
          },
        });
        if (o.json) ctx.json(r);
        else
          ctx.out(
            `advanced ${r.advanced} counter(s) by ${r.by} in ${r.batches} batch(es), ${r.durationMs} ms` +
              (r.lockRetries > 0 ? ` (${r.lockRetries} batch(es) waited for a producer)` : ''),
          );
      });
    });
}
