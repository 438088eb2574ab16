/**
 * `outbox inbox parked list|replay|discard --consumer <name>`: what an operator does with the events
 * an inbox parked (wait-for-gap, `onGapTimeout: 'park'`). The database user reads and updates
 * `inbox_message`: the consumer's own role (`outbox_consumer_<name>`, which sees only its rows),
 * the shared `outbox_consumer`, or the tables' owner (migration 020's row-level security).
 *
 * `outbox inbox failed list --consumer <name>`: the events whose invocation failed and that no
 * delivery applied since (`inbox_failed`); reading them needs the same role. `failed replay` is in
 * failed-replay-command.ts.
 *
 * `replay` marks the events for re-application, then, with `--function-name`, invokes the
 * consumer's function with each one, oldest first, one at a time (RequestResponse, so that each
 * result is seen before the next is sent, and the events of one aggregate keep their order), and
 * checks that the inbox recorded it applied. It stops at the first failure; running it again
 * resumes. Before marking anything it checks that the function is the consumer's: its environment
 * must name the consumer in `OUTBOX_INBOX_CONSUMER` (consumer-function.ts; `--skip-function-check`
 * to do without). Without `--function-name` it prints each event as one JSON line, the payload to
 * invoke the function with by other means (`aws lambda invoke --payload …`).
 */
import type { LambdaClient } from '@aws-sdk/client-lambda';
import type { Command } from 'commander';
import { EXIT } from '../../platform/cli/errors.ts';
import { positiveInteger } from '../../platform/cli/parsers.ts';
import type { OperationsContext } from '../../platform/cli/program.ts';
import type { Sql } from '../../platform/db.ts';
import {
  discardParked,
  type FailedEvent,
  listFailed,
  listParked,
  markParkedForReplay,
  type ParkedEvent,
  type ParkedSelection,
  parkedOutcome,
} from '../operations/index.ts';
import { registerFailedReplay } from './failed-replay-command.ts';
import {
  addInvokeOptions,
  checkFunctionUnlessSkipped,
  type InvokeOptions,
  invokeWithEvent,
  withLambda,
} from './lambda-client.ts';
import { registerQueueCommands } from './queue-commands.ts';

interface Selected {
  consumer: string;
  all?: boolean;
  yes?: boolean;
  json?: boolean;
}

interface ReplayOptions extends Selected, InvokeOptions {
  functionName?: string;
}

const usage = (command: Command, message: string): never =>
  command.error(`error: ${message}`, { exitCode: EXIT.usage, code: 'outbox.usage' });

/** The event ids given, or every parked event of the consumer with --all; never both, never neither. */
function selection(command: Command, ids: string[] | undefined, o: Selected, verb: string): ParkedSelection {
  const eventIds = ids ?? [];
  if (eventIds.length > 0 && o.all) usage(command, 'give event ids or --all, not both');
  if (eventIds.length === 0 && !o.all) {
    usage(
      command,
      `say which parked events to ${verb}: their event ids (\`outbox inbox parked list --consumer ${o.consumer}\` shows them), or --all`,
    );
  }
  return { consumer: o.consumer, ...(o.all ? {} : { eventIds }) };
}

/** Asks before acting on more than one event, unless --yes; reports unknown ids and stops. */
async function confirmed(
  ctx: OperationsContext,
  sql: Sql,
  s: ParkedSelection,
  o: Selected,
  verb: string,
): Promise<boolean> {
  const found = await listParked(sql, s, 100_000);
  const unknown = (s.eventIds ?? []).filter((id) => !found.some((p) => p.eventId === id));
  for (const id of unknown) ctx.err(`no parked event ${id} for consumer ${s.consumer}`);
  if (unknown.length > 0) {
    ctx.err(`nothing was changed (outbox inbox parked list --consumer ${s.consumer} shows them)`);
    ctx.setExitCode(EXIT.failure);
    return false;
  }
  if (found.length > 1 && !o.yes && !(await ctx.confirm(`${verb} ${found.length} parked events? [y/N] `))) {
    ctx.err(`not confirmed: nothing was changed (use --yes to ${verb.toLowerCase()} them without asking)`);
    ctx.setExitCode(EXIT.failure);
    return false;
  }
  return true;
}

/** One line of `list`. */
const row = (p: ParkedEvent) =>
  [
    p.eventId,
    p.type,
    `${p.aggregateType}/${p.aggregateId}`,
    p.sequence,
    p.state,
    p.parkedAt.toISOString(),
    p.reason.slice(0, 120),
  ].join('\t');

/** One line of `failed list`. */
const failedRow = (f: FailedEvent) =>
  [
    f.eventId,
    f.type,
    f.aggregate,
    String(f.sequence ?? ''),
    f.attempts,
    f.lastFailedAt.toISOString(),
    `${f.errorName}: ${f.errorMessage}`.slice(0, 120),
  ].join('\t');

/**
 * Adds `parked list|replay|discard`, `failed list|replay` and `queue list|replay` to `inbox`: the
 * `outbox inbox` command, or the `outbox-inbox` program itself.
 */
export function registerInbox(inbox: Command, ctx: OperationsContext): void {
  const parked = inbox.command('parked').description('list, re-apply or discard the events an inbox parked');

  const failed = inbox
    .command('failed')
    .description('the events whose invocation failed and that no delivery applied since');
  registerFailedReplay(failed, ctx);
  registerQueueCommands(inbox, ctx);
  failed
    .command('list')
    .description(
      'list the failed events of a consumer, oldest first: being retried, in the on-failure destination, or answered for by a wrapper',
    )
    .requiredOption('--consumer <name>', 'the inbox consumer (its `consumer` option)')
    .option('--limit <n>', 'at most n events', positiveInteger, 100)
    .option('--json', 'print one JSON document: an array of failed events, each with the whole event')
    .action(async (o: { consumer: string; limit: number; json?: boolean }) => {
      await ctx.withDb(async (sql) => {
        const events = await listFailed(sql, o.consumer, o.limit);
        if (o.json) {
          ctx.json(events);
          return;
        }
        if (events.length === 0) {
          ctx.out(`no failed events for consumer ${o.consumer}`);
          return;
        }
        ctx.out('eventId\ttype\taggregate\tsequence\tattempts\tlast failed at\terror');
        for (const f of events) ctx.out(failedRow(f));
        ctx.out(
          `${events.length} failed event(s)${events.length === o.limit ? ` (the first ${o.limit}; --limit for more)` : ''}`,
        );
      });
    });

  parked
    .command('list')
    .description('list the parked events of a consumer, oldest first')
    .requiredOption('--consumer <name>', 'the inbox consumer (its `consumer` option)')
    .option('--limit <n>', 'at most n events', positiveInteger, 100)
    .option('--json', 'print one JSON document: an array of parked events, each with the whole event')
    .action(async (o: { consumer: string; limit: number; json?: boolean }) => {
      await ctx.withDb(async (sql) => {
        const events = await listParked(sql, { consumer: o.consumer }, o.limit);
        if (o.json) {
          ctx.json(events);
          return;
        }
        if (events.length === 0) {
          ctx.out(`no parked events for consumer ${o.consumer}`);
          return;
        }
        ctx.out('eventId\ttype\taggregate\tsequence\tstate\tparked at\treason');
        for (const p of events) ctx.out(row(p));
        ctx.out(
          `${events.length} parked event(s)${events.length === o.limit ? ` (the first ${o.limit}; --limit for more)` : ''}`,
        );
      });
    });

  const replay = addInvokeOptions(parked.command('replay'))
    .argument('[eventIds...]', 'event ids (metadata.eventId)')
    .description("re-apply parked events: the consumer's inbox applies each one's next delivery once")
    .requiredOption('--consumer <name>', 'the inbox consumer (its `consumer` option)')
    .option('--all', 'every parked event of the consumer')
    .option(
      '--function-name <name>',
      "invoke the consumer's Lambda function (name or ARN) with each event, one at a time; without it the events are printed, one JSON line each, to invoke it yourself",
    )
    .option('--yes', 'do not ask for confirmation')
    .option('--json', 'print one JSON document: {"replaying": n, "applied": n, "events": [...]}')
    .action(async (ids: string[] | undefined, o: ReplayOptions) => {
      const s = selection(replay, ids, o, 'replay');
      await withLambda(o.functionName, async (client) => {
        // Before anything is marked: another consumer's function would apply these events as its own.
        if (client && o.functionName) await checkFunctionUnlessSkipped(client, o.functionName, o.consumer, o);
        await ctx.withDb(async (sql) => {
          if (!(await confirmed(ctx, sql, s, o, 'Replay'))) return;
          await replayMarked(ctx, sql, s, o, client);
        });
      });
    });

  const discard = parked
    .command('discard')
    .argument('[eventIds...]', 'event ids (metadata.eventId)')
    .description('discard parked events: never applied, kept on record (with your reason) until pruned')
    .requiredOption('--consumer <name>', 'the inbox consumer (its `consumer` option)')
    .requiredOption('--reason <text>', 'why: kept in the record')
    .option('--all', 'every parked event of the consumer')
    .option('--yes', 'do not ask for confirmation')
    .option('--json', 'print one JSON document: {"discarded": n}')
    .action(async (ids: string[] | undefined, o: Selected & { reason: string }) => {
      const s = selection(discard, ids, o, 'discard');
      if (o.reason.trim() === '') usage(discard, '--reason must say why');
      await ctx.withDb(async (sql) => {
        if (!(await confirmed(ctx, sql, s, o, 'Discard'))) return;
        const n = await discardParked(sql, s, o.reason.trim());
        if (o.json) ctx.json({ discarded: n });
        else ctx.out(`discarded ${n} parked event(s)`);
      });
    });
}

/**
 * Marks the selected events for replay, then invokes the function with each (`client`), or, with
 * no function, prints them; sets the exit status when not all were applied.
 */
async function replayMarked(
  ctx: OperationsContext,
  sql: Sql,
  s: ParkedSelection,
  o: ReplayOptions,
  client: LambdaClient | undefined,
): Promise<void> {
  const events = await markParkedForReplay(sql, s);
  if (!client || !o.functionName) {
    if (o.json) ctx.json({ replaying: events.length, applied: 0, events: events.map((e) => e.event) });
    else {
      for (const e of events) ctx.out(JSON.stringify(e.event));
      ctx.err(
        `marked ${events.length} parked event(s) for replay: invoke the consumer's function with each line above; its inbox applies each once`,
      );
    }
    return;
  }
  const applied = await invokeEach(ctx, sql, client, events, o.functionName, o.timeout, o.json ?? false);
  if (o.json) ctx.json({ replaying: events.length, applied, events: events.map((e) => e.eventId) });
  else ctx.out(`replayed ${applied} of ${events.length} parked event(s) through ${o.functionName}`);
  if (applied < events.length) ctx.setExitCode(EXIT.failure);
}

/**
 * Invokes the function with each event in turn and checks the inbox's record: applied when its
 * outcome became `processed`. Stops at the first event that was not.
 * @returns how many were applied
 */
async function invokeEach(
  ctx: OperationsContext,
  sql: Sql,
  client: LambdaClient,
  events: ParkedEvent[],
  functionName: string,
  timeoutSeconds: number,
  quiet: boolean,
): Promise<number> {
  let applied = 0;
  for (const p of events) {
    const answer = await invokeWithEvent(client, functionName, p.event, timeoutSeconds);
    const { payload } = answer;
    const outcome = await parkedOutcome(sql, p.consumer, p.eventId);
    if (answer.functionError || outcome !== 'processed') {
      ctx.err(
        `${p.eventId} (${p.type} ${p.aggregateType}/${p.aggregateId} #${p.sequence}): not applied` +
          (answer.functionError
            ? ` — the function failed (${answer.functionError}): ${payload.slice(0, 500)}`
            : ` — the function answered ${payload.slice(0, 200) || 'nothing'} but the record is ${outcome ?? 'gone'}: is ${functionName} the function of consumer ${p.consumer}?`),
      );
      ctx.err(
        'stopped: the remaining events stay marked for replay; run the command again once the cause is fixed',
      );
      return applied;
    }
    applied++;
    if (!quiet)
      ctx.err(`applied ${p.eventId} (${p.type} ${p.aggregateType}/${p.aggregateId} #${p.sequence})`);
  }
  return applied;
}
