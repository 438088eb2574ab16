/**
 * Operator commands: `outbox dead-letters list|show|replay|discard` and `outbox prune`. Each says
 * what it did, and acting on more than one row needs `--yes` or a confirmation at the prompt.
 */
import type { Command } from 'commander';
import {
  type DeadLetterFilter,
  discardDeadLetters,
  findDeadLetterIds,
  listDeadLetters,
  prune,
  replayDeadLetters,
  resolveDeadLetterIds,
  showDeadLetter,
} from '../shared/operations/index.ts';
import type { Sql } from '../shared/platform/index.ts';
import { loadMonitorSettings, OutboxValidationError } from '../shared/platform/index.ts';

/** What the operator commands need from the CLI. */
export interface OperationsContext {
  out: (line: string) => void;
  err: (line: string) => void;
  env: NodeJS.ProcessEnv;
  withDb: (fn: (sql: Sql) => Promise<void>) => Promise<void>;
  /** Asks a yes/no question; false when there is no terminal to ask. */
  confirm: (question: string) => Promise<boolean>;
  setExitCode: (code: number) => void;
}

interface FilterOptions {
  type?: string;
  aggregate?: string;
  since?: string;
  all?: boolean;
  yes?: boolean;
  json?: boolean;
  limit?: string;
}

function toFilter(o: FilterOptions): DeadLetterFilter {
  let since: Date | undefined;
  if (o.since !== undefined) {
    since = parseSince(o.since);
  }
  return { type: o.type, aggregate: o.aggregate, since };
}

/** `--since` takes an ISO date/time or a duration back from now: `90m`, `36h`, `7d`. */
export function parseSince(value: string, now = new Date()): Date {
  const m = /^(\d+(?:\.\d+)?)([smhd])$/.exec(value.trim());
  if (m) {
    const unit = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 's' | 'm' | 'h' | 'd'];
    return new Date(now.getTime() - Number(m[1]) * unit);
  }
  const date = new Date(value);
  if (Number.isNaN(date.getTime())) {
    throw new OutboxValidationError(
      '--since',
      `"${value}" is neither an ISO date/time nor a duration like 36h or 7d`,
    );
  }
  return date;
}

/** Adds `dead-letters list|show|replay|discard` and `prune` to the program. */
export function registerOperations(program: Command, ctx: OperationsContext): void {
  const dl = program.command('dead-letters').description('inspect, replay and discard dead-lettered events');

  dl.command('list')
    .description('list dead letters, oldest first')
    .option('--type <type>', 'only this event type (DetailType)')
    .option('--aggregate <aggregate>', 'only this aggregate type, or type/id')
    .option('--since <when>', 'dead-lettered since an ISO time or a duration back (36h, 7d)')
    .option('--limit <n>', 'at most n rows', '100')
    .option('--json', 'print JSON lines')
    .action(async (o: FilterOptions) => {
      await ctx.withDb(async (sql) => {
        const rows = await listDeadLetters(sql, toFilter(o), Number.parseInt(o.limit ?? '100', 10));
        if (o.json) {
          for (const r of rows) ctx.out(JSON.stringify(r));
          return;
        }
        if (rows.length === 0) {
          ctx.out('no dead letters');
          return;
        }
        ctx.out('id\teventId\ttype\taggregate\tsequence\tattempts\tdead-lettered at\terror');
        for (const r of rows) {
          ctx.out(
            [
              r.id,
              r.eventId,
              r.type,
              `${r.aggregateType}/${r.aggregateId}`,
              r.sequence,
              r.attempts,
              r.deadLetteredAt.toISOString(),
              (r.lastError ?? '').slice(0, 120),
            ].join('\t'),
          );
        }
        ctx.out(`${rows.length} dead letter(s)`);
      });
    });

  dl.command('show <id>')
    .description('show one dead letter (row id or eventId): error, attempts and the envelope')
    .action(async (id: string) => {
      await ctx.withDb(async (sql) => {
        const d = await showDeadLetter(sql, id);
        if (!d) {
          ctx.err(`no dead letter with id ${id}`);
          ctx.setExitCode(1);
          return;
        }
        ctx.out(JSON.stringify(d, null, 2));
      });
    });

  const act = (name: 'replay' | 'discard', verb: string, run: (sql: Sql, ids: string[]) => Promise<number>) =>
    dl
      .command(`${name} [ids...]`)
      .description(
        name === 'replay'
          ? 'put dead letters back to pending (attempts reset); by id, or --all with filters'
          : 'discard dead letters: kept for audit, never published; by id, or --all with filters',
      )
      .option('--all', 'every dead letter matching the filters')
      .option('--type <type>', 'with --all: only this event type')
      .option('--aggregate <aggregate>', 'with --all: only this aggregate type, or type/id')
      .option('--since <when>', 'with --all: dead-lettered since an ISO time or a duration back (36h, 7d)')
      .option('--yes', 'do not ask for confirmation')
      .action(async (refs: string[], o: FilterOptions) => {
        if (refs.length > 0 === Boolean(o.all)) {
          throw new OutboxValidationError(
            'ids',
            'give dead-letter ids, or --all (with optional filters), not both',
          );
        }
        await ctx.withDb(async (sql) => {
          let ids: string[];
          if (o.all) {
            ids = await findDeadLetterIds(sql, toFilter(o));
          } else {
            const resolved = await resolveDeadLetterIds(sql, refs);
            for (const u of resolved.unknown) ctx.err(`no dead letter with id ${u}`);
            if (resolved.unknown.length > 0) {
              ctx.setExitCode(1);
              return;
            }
            ids = resolved.ids;
          }
          if (ids.length === 0) {
            ctx.out(`no dead letters to ${name}`);
            return;
          }
          if (
            ids.length > 1 &&
            !o.yes &&
            !(await ctx.confirm(`${verb} ${ids.length} dead letters? [y/N] `))
          ) {
            ctx.err(
              `not confirmed: nothing was changed (use --yes to ${name} ${ids.length} dead letters without asking)`,
            );
            ctx.setExitCode(1);
            return;
          }
          const n = await run(sql, ids);
          ctx.out(`${name === 'replay' ? 'replayed' : 'discarded'} ${n} dead letter(s)`);
        });
      });
  act('replay', 'Replay', replayDeadLetters);
  act('discard', 'Discard', discardDeadLetters);

  program
    .command('prune')
    .description(
      'delete published rows past their retention, and dead letters past theirs (as the monitor does)',
    )
    .option('--dry-run', 'count what would be deleted, delete nothing')
    .action(async (o: { dryRun?: boolean }) => {
      const s = loadMonitorSettings(ctx.env);
      await ctx.withDb(async (sql) => {
        const r = await prune(sql, {
          publishedRetentionSeconds: s.publishedRetentionSeconds,
          deadLetterRetentionSeconds: s.deadLetterRetentionSeconds,
          inboxRetentionSeconds: s.inboxRetentionSeconds,
          idempotencyKeyRetentionSeconds: s.idempotencyKeyRetentionSeconds,
          batchSize: s.pruneBatchSize,
          timeBudgetMs: s.pruneTimeBudgetMs,
          dryRun: o.dryRun,
        });
        const what = `${r.publishedDeleted} published row(s) and ${r.deadLettersDeleted} dead letter(s)`;
        if (r.dryRun) ctx.out(`would delete ${what}`);
        else
          ctx.out(
            `deleted ${what} in ${r.batches.length} batch(es), ${r.durationMs} ms${r.complete ? '' : ' (time budget spent; run again to continue)'}`,
          );
      });
    });
}
