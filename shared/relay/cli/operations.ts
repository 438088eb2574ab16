/**
 * Operator commands: `outbox dead-letters list|show|replay|discard` and `outbox prune`. Each says
 * what it did, and acting on more than one row needs `--yes` or a confirmation at the prompt.
 */
import { type Command, InvalidArgumentError } from 'commander';
import { EXIT } from '../../platform/cli/errors.ts';
import { parseSince, positiveInteger } from '../../platform/cli/parsers.ts';
import type { OperationsContext } from '../../platform/cli/program.ts';
import type { Sql } from '../../platform/index.ts';
import { loadMonitorSettings, parseExactJson, rawJson } from '../../platform/index.ts';
import {
  type DeadLetterDetail,
  type DeadLetterFilter,
  discardDeadLetters,
  findDeadLetterIds,
  listDeadLetters,
  parseEventRef,
  prune,
  replayDeadLetters,
  resolveDeadLetterIds,
  showDeadLetter,
} from '../operations/index.ts';

interface FilterOptions {
  type?: string;
  aggregate?: string;
  since?: Date | { secondsAgo: number };
  all?: boolean;
  yes?: boolean;
  json?: boolean;
  limit: number;
}

const toFilter = (o: FilterOptions): DeadLetterFilter => ({
  type: o.type,
  aggregate: o.aggregate,
  since: o.since,
});

const SINCE_HELP =
  'dead-lettered since an ISO date (UTC) or date-time with its zone (2026-11-30T09:00Z), or a duration back from the database clock (90m, 36h, 7d)';

/** Adds `dead-letters list|show|replay|discard` and `prune` to the program. */
export function registerOperations(program: Command, ctx: OperationsContext): void {
  const dl = program.command('dead-letters').description('inspect, replay and discard dead-lettered events');

  dl.command('list')
    .description('list dead letters, oldest first')
    .option('--type <type>', 'only this event type (DetailType)')
    .option('--aggregate <aggregate>', 'only this aggregate type, or type/id')
    .option('--since <when>', SINCE_HELP, (v: string) => parseSince(v))
    .option('--limit <n>', 'at most n rows', positiveInteger, 100)
    .option('--json', 'print one JSON document: an array of dead letters')
    .action(async (o: FilterOptions) => {
      await ctx.withDb(async (sql) => {
        const rows = await listDeadLetters(sql, toFilter(o), o.limit);
        if (o.json) {
          ctx.json(rows.map(forJson));
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
        ctx.out(
          `${rows.length} dead letter(s)${rows.length === o.limit ? ` (the first ${o.limit}; --limit for more)` : ''}`,
        );
      });
    });

  dl.command('show')
    .argument('<id>', 'row id or eventId', eventRef)
    .description('show one dead letter: its error, attempts and the event')
    .option('--json', 'print one JSON document')
    .action(async (id: string, o: { json?: boolean }) => {
      await ctx.withDb(async (sql) => {
        const d = await showDeadLetter(sql, id);
        if (!d) {
          ctx.err(`no dead letter with id ${id} (outbox dead-letters list shows them)`);
          ctx.setExitCode(EXIT.failure);
          return;
        }
        if (o.json) {
          const { payloadJson, traceHeader, ...rest } = d;
          ctx.json({ ...forJson(rest), payload: parseExactJson(payloadJson), traceHeader });
        } else for (const line of formatDeadLetter(d)) ctx.out(line);
      });
    });

  const act = (
    name: 'replay' | 'discard',
    verb: string,
    run: (sql: Sql, ids: string[]) => Promise<number>,
  ) => {
    const command = dl
      .command(name)
      .argument('[ids...]', 'row ids or eventIds', eventRefs)
      .description(
        name === 'replay'
          ? 'put dead letters back to pending (attempts reset); by id, or --all with filters'
          : 'discard dead letters: kept for audit, never published; by id, or --all with filters',
      )
      .option('--all', 'every dead letter matching the filters')
      .option('--type <type>', 'with --all: only this event type')
      .option('--aggregate <aggregate>', 'with --all: only this aggregate type, or type/id')
      .option('--since <when>', `with --all: ${SINCE_HELP}`, (v: string) => parseSince(v))
      .option('--yes', 'do not ask for confirmation')
      .option('--json', `print one JSON document: {"${name === 'replay' ? 'replayed' : 'discarded'}": n}`)
      .action(async (refs: string[] | undefined, o: FilterOptions) => {
        const ids = refs ?? [];
        if (ids.length > 0 && o.all) {
          command.error(`error: give dead-letter ids or --all, not both`, {
            exitCode: EXIT.usage,
            code: 'outbox.usage',
          });
        }
        if (ids.length === 0 && !o.all) {
          command.error(
            `error: say which dead letters to ${name}: their ids (\`outbox dead-letters list\` shows them), ` +
              'or --all (with optional --type, --aggregate, --since)',
            { exitCode: EXIT.usage, code: 'outbox.usage' },
          );
        }
        if (!o.all && (o.type || o.aggregate || o.since)) {
          command.error(
            'error: --type, --aggregate and --since select rows for --all; with ids, leave them out',
            {
              exitCode: EXIT.usage,
              code: 'outbox.usage',
            },
          );
        }
        await ctx.withDb(async (sql) => {
          let rowIds: string[];
          if (o.all) {
            rowIds = await findDeadLetterIds(sql, toFilter(o));
          } else {
            const resolved = await resolveDeadLetterIds(sql, ids);
            for (const u of resolved.unknown) ctx.err(`no dead letter with id ${u}`);
            if (resolved.unknown.length > 0) {
              ctx.err('nothing was changed (outbox dead-letters list shows the ids)');
              ctx.setExitCode(EXIT.failure);
              return;
            }
            rowIds = resolved.ids;
          }
          const done = (n: number) => {
            if (o.json) ctx.json({ [name === 'replay' ? 'replayed' : 'discarded']: n });
            else if (rowIds.length === 0) ctx.out(`no dead letters to ${name}`);
            else ctx.out(`${name === 'replay' ? 'replayed' : 'discarded'} ${n} dead letter(s)`);
          };
          if (rowIds.length === 0) {
            done(0);
            return;
          }
          if (
            rowIds.length > 1 &&
            !o.yes &&
            !(await ctx.confirm(`${verb} ${rowIds.length} dead letters? [y/N] `))
          ) {
            ctx.err(
              `not confirmed: nothing was changed (use --yes to ${name} ${rowIds.length} dead letters without asking)`,
            );
            ctx.setExitCode(EXIT.failure);
            return;
          }
          done(await run(sql, rowIds));
        });
      });
  };
  act('replay', 'Replay', replayDeadLetters);
  act('discard', 'Discard', discardDeadLetters);

  program
    .command('prune')
    .description(
      'delete published rows past their retention, and dead letters past theirs (as the monitor does)',
    )
    .option('--dry-run', 'count what would be deleted, delete nothing')
    .option('--json', 'print one JSON document with the counts')
    .action(async (o: { dryRun?: boolean; json?: boolean }) => {
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
        if (o.json) {
          ctx.json(r);
          return;
        }
        const what = `${r.publishedDeleted} published row(s) and ${r.deadLettersDeleted} dead letter(s)`;
        if (r.dryRun) ctx.out(`would delete ${what}`);
        else
          ctx.out(
            `deleted ${what} in ${r.batches.length} batch(es), ${r.durationMs} ms${r.complete ? '' : ' (time budget spent; run again to continue)'}`,
          );
      });
    });
}

/**
 * A dead letter for `--json`: as the library returns it, but with `sequence` a JSON number literal
 * (as in the event's Detail), written digit for digit from its decimal text.
 */
function forJson<T extends { sequence: string }>(d: T): Omit<T, 'sequence'> & { sequence: unknown } {
  return { ...d, sequence: rawJson(d.sequence) };
}

/** A dead letter for a terminal: the facts first, then the error, then the payload. */
function formatDeadLetter(d: DeadLetterDetail): string[] {
  return [
    `id:               ${d.id}`,
    `eventId:          ${d.eventId}`,
    `type:             ${d.type}`,
    `source:           ${d.source}`,
    `aggregate:        ${d.aggregateType}/${d.aggregateId} #${d.sequence}`,
    `attempts:         ${d.attempts}`,
    `created at:       ${d.createdAt.toISOString()}`,
    `dead-lettered at: ${d.deadLetteredAt.toISOString()}${d.discardedAt ? ` (discarded ${d.discardedAt.toISOString()})` : ''}`,
    ...(d.traceHeader ? [`trace header:     ${d.traceHeader}`] : []),
    `error:            ${d.lastError ?? '-'}`,
    'payload:',
    ...JSON.stringify(parseExactJson(d.payloadJson), null, 2)
      .split('\n')
      .map((l) => `  ${l}`),
  ];
}

/** A dead letter's row id (digits) or eventId (uuid), as the operator typed it. */
function eventRef(value: string): string {
  try {
    parseEventRef(value);
  } catch {
    throw new InvalidArgumentError('It must be a row id (digits) or an event id (uuid).');
  }
  return value;
}

/** {@link eventRef} for a variadic argument: collects the ids. */
function eventRefs(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), eventRef(value)];
}
