/**
 * The `outbox` command line, on commander. Every command reads the configuration contract's
 * environment variables (DATABASE_URL or PG*, EVENT_BUS_NAME, OUTBOX_*; the endpoint through the
 * AWS SDK's own AWS_ENDPOINT_URL_EVENTBRIDGE). `outbox inbox …` is the consumer package's command
 * set (shared/consumer/cli/), which that package also ships on its own as `outbox-inbox`. The
 * conventions (output, `--json`, exit statuses) are shared/platform/cli/program.ts's.
 */
import type { Command } from 'commander';
import { registerInboxCommands } from '../../consumer/cli/index.ts';
import { EXIT } from '../../platform/cli/errors.ts';
import { positiveInteger } from '../../platform/cli/parsers.ts';
import {
  type CliIo,
  CONVENTIONS_HELP,
  type CommandContext,
  commandContext,
  createProgram,
  DATABASE_HELP,
  defaultIo,
  type OperationsContext,
  runProgram,
} from '../../platform/cli/program.ts';
import {
  DEFAULT_ROLES,
  databaseUrlFromEnv,
  EnvVar,
  migrate,
  OutboxConfigError,
  readSetting,
  unreleasedMigrationNumbers,
} from '../../platform/index.ts';
import {
  type BacklogDetail,
  consumerRoleName,
  getBacklogDetail,
  getStatus,
  INBOX_FAILED_SETTLE_SECONDS,
  migrateWithRoles,
} from '../operations/index.ts';
import { registerBus } from './bus-command.ts';
import { registerCounters } from './counters-command.ts';
import { type EnqueueProgress, enqueueFromLines } from './enqueue-lines.ts';
import { registerOperations } from './operations.ts';
import { registerRelay } from './relay-command.ts';

export type { CliIo } from '../../platform/cli/program.ts';

/** Least time between two `enqueue` progress lines, ms. */
const ENQUEUE_PROGRESS_EVERY_MS = 1_000;

/**
 * Runs the CLI.
 * @param argv `process.argv` shape (node, script, …args)
 * @returns the exit code: 0 ok, 1 failure, 2 usage or configuration error
 */
export async function main(argv: string[], cliIo: CliIo = defaultIo()): Promise<number> {
  let code: number = EXIT.ok;
  const ctx = commandContext(cliIo, (c) => {
    code = c;
  });
  const program = outboxProgram(ctx);
  registerMigrate(program, ctx);
  registerRelay(program, ctx);
  registerEnqueue(program, ctx);
  registerStatus(program, ctx);
  registerOperations(program, ctx);
  registerInboxCommands(
    program
      .command('inbox')
      .description(
        "a consumer's inbox: parked events (order: 'wait-for-gap', onGapTimeout: 'park'), failed events, failure queues, pruning and metrics (also `outbox-inbox` of @outbox-relay-aws/consumer)",
      ),
    ctx,
  );
  registerCounters(program, ctx);
  registerBus(program, ctx);
  return runProgram(program, argv, ctx, () => code);
}

/** The `outbox` command itself: its version, help and output conventions. */
function outboxProgram(ctx: OperationsContext): Command {
  return createProgram(
    'outbox',
    'Transactional outbox relay: Postgres outbox table → Amazon EventBridge',
    ctx,
  ).addHelpText(
    'after',
    `
Environment:
${DATABASE_HELP}; \`npm run db\` in a checkout starts a local one
  EVENT_BUS_NAME                the classic EventBridge bus (relay)
  OUTBOX_EVENT_BUS_ARN          a Custom Event Bus (EventsV2) instead, by ARN (relay)
  AWS_REGION, AWS credentials   to sign PutEvents (relay); AWS_ENDPOINT_URL_EVENTBRIDGE (classic) or
                                AWS_ENDPOINT_URL_EVENTBRIDGEV2 (Custom Event Bus) for a local bus
  OUTBOX_*                      tuning, each with a default (docs/configuration.md)

${CONVENTIONS_HELP}`,
  );
}

/** `outbox migrate [--roles [--consumer <name>…]]`. */
function registerMigrate(program: Command, ctx: OperationsContext): void {
  const command = program
    .command('migrate')
    .description('apply pending schema migrations (outbox tables) to the database')
    .option(
      '--roles',
      'also create or update the deployment roles (outbox_relay, outbox_monitor, outbox_producer, outbox_consumer) exactly as the deploy-time migrate function does; needs a user that may create roles',
    )
    .option(
      '--consumer <name>',
      "with --roles: also the inbox consumer's own role, outbox_consumer_<name>, which touches only that consumer's inbox rows (repeat for each consumer)",
      (name: string, names: string[]) => [...names, name],
      [] as string[],
    )
    .option('--json', 'print one JSON document: {"applied": [names], "roles": [names]}')
    .action(async (opts: { roles?: boolean; consumer: string[]; json?: boolean }) => {
      if (opts.consumer.length > 0 && !opts.roles) {
        command.error('error: --consumer creates a role: give --roles too', {
          exitCode: EXIT.usage,
          code: 'outbox.usage',
        });
      }
      // Checked before anything is applied: a name whose role Postgres would cut short.
      const consumerRoles = opts.consumer.map((name) => {
        try {
          return consumerRoleName(name);
        } catch (error) {
          const reason =
            error instanceof OutboxConfigError ? error.message.replace(/^consumer: /, '') : error;
          return command.error(`error: --consumer ${reason}`, { exitCode: EXIT.usage, code: 'outbox.usage' });
        }
      });
      const url = databaseUrlFromEnv(ctx.env);
      // No published history (OUTBOX_PUBLISHED_RETENTION_DAYS=0): the relay role may delete rows.
      const relayDeletesPublished = readSetting(EnvVar.publishedRetentionDays, ctx.env) === 0;
      const applied = opts.roles
        ? await migrateWithRoles(url, { consumers: opts.consumer, relayDeletesPublished })
        : await migrate(url, { log: () => {} });
      const roles = opts.roles ? [...Object.values(DEFAULT_ROLES), ...new Set(consumerRoles)] : [];
      if (opts.json) {
        ctx.json(opts.roles ? { applied, roles, relayDeletesPublished } : { applied });
        return;
      }
      ctx.out(
        applied.length === 0
          ? 'schema is up to date'
          : `applied ${applied.length} migration(s): ${applied.join(', ')}`,
      );
      // The gaps in the numbering read as migrations skipped: say they never existed.
      const first = applied[0]?.slice(0, 3) ?? '';
      const last = applied.at(-1)?.slice(0, 3) ?? '';
      const gaps = unreleasedMigrationNumbers().filter((n) => n > first && n < last);
      if (gaps.length > 0) {
        ctx.out(
          `no migration ${gaps.join(gaps.length === 2 ? ' or ' : ', ')}: ` +
            `${gaps.length === 1 ? 'that number was' : 'those numbers were'} never released ` +
            '(a migration takes the next number after the highest)',
        );
      }
      if (opts.roles) ctx.out(`roles ensured: ${roles.join(', ')}`);
      if (opts.roles && relayDeletesPublished) {
        ctx.out(
          `${DEFAULT_ROLES.relay} may delete the rows it publishes (${EnvVar.publishedRetentionDays}=0: no published history)`,
        );
      }
    });
}

/** `outbox enqueue`: JSON lines on stdin, all validated before any is written. */
function registerEnqueue(program: Command, ctx: CommandContext): void {
  program
    .command('enqueue')
    .description(
      'enqueue events from JSON lines on stdin (backfills); all lines are validated before any is written',
    )
    .option('--source <source>', 'Source for lines without one (default: $OUTBOX_DEFAULT_SOURCE)')
    .option('--batch-size <n>', 'events per transaction', positiveInteger, 1000)
    .option('--json', 'print one JSON document: {"enqueued", "duplicates", "errors"}')
    .action(async (opts: { source?: string; batchSize: number; json?: boolean }) => {
      // The bus's request limit bounds an entry too: what the relay could not send is refused here.
      const maxEntryBytes = readSetting(EnvVar.maxRequestBytes, ctx.env);
      const defaultSource = opts.source ?? readSetting(EnvVar.defaultSource, ctx.env);
      await ctx.withDb(async (sql) => {
        let lastProgressAt = performance.now();
        const result = await enqueueFromLines(sql, ctx.stdin, {
          defaultSource,
          maxEntryBytes,
          batchSize: opts.batchSize,
          reading: (lines) => ctx.err(`enqueue: ${lines} lines read and checked…`),
          progress: (p: EnqueueProgress) => {
            // One transaction's worth is reported by the summary alone; longer work gets a line
            // a second and one at the end.
            if (p.total <= opts.batchSize) return;
            const now = performance.now();
            if (p.done < p.total && now - lastProgressAt < ENQUEUE_PROGRESS_EVERY_MS) return;
            lastProgressAt = now;
            ctx.err(
              `enqueue: ${p.done} of ${p.total} events done: ${p.enqueued} enqueued, ${p.duplicates} duplicate(s) skipped`,
            );
          },
        });
        if (result.errors.length > 0) {
          for (const e of result.errors) ctx.err(`line ${e.line}: ${e.message}`);
          ctx.err(`enqueue: ${result.errors.length} invalid line(s); nothing was written`);
          if (opts.json) ctx.json(result);
          ctx.setExitCode(EXIT.failure);
          return;
        }
        if (opts.json) ctx.json(result);
        else ctx.out(`enqueued ${result.enqueued} event(s), ${result.duplicates} duplicate(s) skipped`);
      });
    });
}

/** Characters of a last error `outbox status` prints (the JSON has it whole). */
const LAST_ERROR_SHOWN = 200;

/** `outbox status`. */
function registerStatus(program: Command, ctx: OperationsContext): void {
  program
    .command('status')
    .description(
      'show the backlog: pending, oldest pending age, in flight, dead-lettered, published, parked and failed inbox events, ' +
        'events held back behind dead letters, in backoff, retrying (and their last errors), and the relays the monitor would scale to ' +
        `(${EnvVar.maxRelays}, ${EnvVar.backlogPerRelay}, ${EnvVar.ordering} and ${EnvVar.deadLetterPolicy} as deployed)`,
    )
    .option('--json', 'print one JSON document')
    .action(async (opts: { json?: boolean }) => {
      // The monitor's scale-out settings, read as the monitor reads them, before connecting.
      const scaleOut = {
        maxRelays: readSetting(EnvVar.maxRelays, ctx.env),
        backlogPerRelay: readSetting(EnvVar.backlogPerRelay, ctx.env),
        ordering: readSetting(EnvVar.ordering, ctx.env),
        deadLetterPolicy: readSetting(EnvVar.deadLetterPolicy, ctx.env),
      };
      const keepsHistory = readSetting(EnvVar.publishedRetentionDays, ctx.env) !== 0;
      await ctx.withDb(async (sql) => {
        const s = await getStatus(sql);
        const d = await getBacklogDetail(sql, scaleOut);
        if (opts.json) {
          ctx.json({ ...s, ...d });
          return;
        }
        ctx.out(`pending:             ${s.pending}`);
        ctx.out(`oldest pending age:  ${s.oldestPendingAgeSeconds.toFixed(1)} s`);
        ctx.out(`in flight:           ${s.inFlight}`);
        ctx.out(`in backoff:          ${d.inBackoff}`);
        ctx.out(
          `retrying:            ${d.retrying}${d.retrying > 0 ? ' (their last attempt failed, with:)' : ''}`,
        );
        for (const e of d.lastErrors) ctx.out(`  ${e.count} × ${e.error.slice(0, LAST_ERROR_SHOWN)}`);
        ctx.out(`held back:           ${d.heldBack}${heldBackNote(d, scaleOut.deadLetterPolicy)}`);
        for (const h of d.heldBackBy) {
          ctx.out(
            `  ${h.heldBack} behind dead letter ${h.id} (${h.aggregateType}/${h.aggregateId} #${h.sequence}): outbox dead-letters show ${h.id}`,
          );
        }
        ctx.out(`dead-lettered:       ${s.deadLettered}`);
        ctx.out(
          `published:           ${s.published}${keepsHistory ? '' : ` (${EnvVar.publishedRetentionDays}=0: published rows are deleted as they go out)`}`,
        );
        ctx.out(`inbox parked:        ${s.inboxParked}`);
        // The list shows every trace; the count only those whose retries are over (the monitor's
        // InboxFailedCount): a bare 0 beside a list of 10 would read as a contradiction.
        ctx.out(
          `inbox failed:        ${s.inboxFailed}${s.inboxFailedRetrying > 0 ? ` (and ${s.inboxFailedRetrying} still within Lambda's retries: ${s.inboxFailedRetrying === 1 ? 'its' : 'their'} last attempt under ${INBOX_FAILED_SETTLE_SECONDS / 60} minutes ago; outbox inbox failed list shows all)` : ''}`,
        );
        ctx.out(`monitor scales to:   ${scaleOutLine(d.scaleOut)}`);
      });
    });
}

/** Says on the `held back` line what holds the events back, and whether they stay held. */
function heldBackNote(d: BacklogDetail, policy: 'continue' | 'block'): string {
  if (d.heldBack === 0) return '';
  const letters = d.heldBackBy.length === 1 ? '1 dead letter' : `${d.heldBackBy.length}+ dead letters`;
  return policy === 'block'
    ? ` (behind ${letters}, ${EnvVar.deadLetterPolicy}=block: replay or discard them to release)`
    : ` (behind ${letters}; ${EnvVar.deadLetterPolicy}=continue here: if they stay, the relay runs with block)`;
}

/** The `monitor scales to` line: relays, and why no more. */
function scaleOutLine(o: BacklogDetail['scaleOut']): string {
  const relays = `${o.relays} relay${o.relays === 1 ? '' : 's'}`;
  if (o.maxRelays === 1) return `${relays} (scale-out off: ${EnvVar.maxRelays}=1)`;
  if (o.throttled) return `${relays} (the bus is throttling: no extra relays)`;
  const claimable =
    o.claimable > (o.maxRelays - 1) * o.backlogPerRelay ? `${o.claimable - 1}+` : `${o.claimable}`;
  return `${relays} of ${o.maxRelays} (${claimable} claimable, ${o.backlogPerRelay} per relay)`;
}
