/**
 * `outbox inbox failed replay --consumer <name> (<eventIds…> | --all) [--function-name F]`: invokes
 * the consumer's function again with the events it failed on and that no delivery applied since
 * (`inbox_failed`), once their cause is fixed: in each aggregate's order (`sequence`), aggregate by
 * aggregate, one at a time (RequestResponse, so each result is seen before the next is sent). An
 * event is replayed when its trace is gone afterwards: the inbox deletes it in the transaction that
 * applies, parks or acknowledges the event, so a trace left means the delivery was not taken. After
 * a failure the rest of that aggregate's events wait (they would only wait for it); the other
 * aggregates go on. Running it again takes what is left; a second replay of a replayed event finds
 * no trace, and the inbox would acknowledge it as a duplicate anyway.
 *
 * Only traces whose last attempt is older than `--settled-seconds` (300, as the monitor counts
 * them) are taken: Lambda may still be retrying a younger one. Without `--function-name`, or with
 * `--dry-run`, the events are printed in the order they would be invoked.
 */
import type { LambdaClient } from '@aws-sdk/client-lambda';
import type { Command } from 'commander';
import { EXIT } from '../../platform/cli/errors.ts';
import { nonNegativeInteger } from '../../platform/cli/parsers.ts';
import type { OperationsContext } from '../../platform/cli/program.ts';
import type { Sql } from '../../platform/db.ts';
import { type FailedEvent, failedForReplay, isStillFailed } from '../operations/index.ts';
import {
  addInvokeOptions,
  checkFunctionUnlessSkipped,
  type InvokeOptions,
  invokeWithEvent,
  withLambda,
} from './lambda-client.ts';

interface FailedReplayOptions extends InvokeOptions {
  consumer: string;
  all?: boolean;
  functionName?: string;
  settledSeconds: number;
  dryRun?: boolean;
  yes?: boolean;
  json?: boolean;
}

/** What became of one event of a replay. */
interface Replayed {
  eventId: string;
  aggregate: string;
  sequence: unknown;
  /** `applied`: its trace is gone; `failed`: the function failed or the trace stayed; `held`: an earlier event of its aggregate failed. */
  outcome: 'applied' | 'failed' | 'held';
  error?: string;
}

const label = (f: FailedEvent) => `${f.eventId} (${f.type} ${f.aggregate} #${String(f.sequence ?? '?')})`;

/** Adds `replay` to `outbox inbox failed`. */
export function registerFailedReplay(failed: Command, ctx: OperationsContext): void {
  const replay = addInvokeOptions(failed.command('replay'))
    .argument('[eventIds...]', 'event ids (metadata.eventId), as `outbox inbox failed list` shows them')
    .description(
      "invoke the consumer's function again with its failed events, in each aggregate's order, once their cause is fixed",
    )
    .requiredOption('--consumer <name>', 'the inbox consumer (its `consumer` option)')
    .option('--all', 'every settled failed event of the consumer')
    .option(
      '--function-name <name>',
      "the consumer's Lambda function (name or ARN); without it the events are printed, one JSON line each, in order",
    )
    .option(
      '--settled-seconds <s>',
      'only events whose last attempt is older than this (Lambda may still be retrying a younger one)',
      nonNegativeInteger,
      300,
    )
    .option('--dry-run', 'print what would be replayed, in order, and invoke nothing')
    .option('--yes', 'do not ask for confirmation')
    .option('--json', 'print one JSON document: {"replayed": n, "of": n, "events": [...]}')
    .action(async (ids: string[] | undefined, o: FailedReplayOptions) => {
      const eventIds = ids ?? [];
      if (eventIds.length > 0 && o.all) usage(replay, 'give event ids or --all, not both');
      if (eventIds.length === 0 && !o.all) {
        usage(
          replay,
          `say which failed events to replay: their event ids (\`outbox inbox failed list --consumer ${o.consumer}\` shows them), or --all`,
        );
      }
      const invoke = o.dryRun ? undefined : o.functionName;
      await withLambda(invoke, async (client) => {
        if (client && invoke) await checkFunctionUnlessSkipped(client, invoke, o.consumer, o);
        await ctx.withDb(async (sql) => {
          const events = await failedForReplay(sql, o.consumer, {
            ...(o.all ? {} : { eventIds }),
            settledSeconds: o.settledSeconds,
          });
          const missing = eventIds.filter((id) => !events.some((e) => e.eventId === id));
          for (const id of missing) {
            ctx.err(
              `no settled failed event ${id} for consumer ${o.consumer} (applied since, or its last attempt is younger than ${o.settledSeconds} s)`,
            );
          }
          if (missing.length > 0) {
            ctx.setExitCode(EXIT.failure);
            return;
          }
          if (events.length === 0) {
            if (o.json) ctx.json({ replayed: 0, of: 0, events: [] });
            else ctx.out(`no settled failed events for consumer ${o.consumer}`);
            return;
          }
          if (!client || !invoke) {
            if (o.json) ctx.json({ replayed: 0, of: events.length, events: events.map((e) => e.event) });
            else for (const e of events) ctx.out(JSON.stringify(e.event));
            if (!o.json) {
              ctx.err(
                `${events.length} failed event(s), in the order to invoke the consumer's function with them${o.dryRun ? ' (dry run: nothing invoked)' : ''}`,
              );
            }
            return;
          }
          if (
            events.length > 1 &&
            !o.yes &&
            !(await ctx.confirm(`Replay ${events.length} failed events? [y/N] `))
          ) {
            ctx.err('not confirmed: nothing was invoked (use --yes to replay them without asking)');
            ctx.setExitCode(EXIT.failure);
            return;
          }
          const results = await invokeInOrder(ctx, sql, client, events, invoke, o);
          const replayed = results.filter((r) => r.outcome === 'applied').length;
          if (o.json) ctx.json({ replayed, of: events.length, events: results });
          else ctx.out(`replayed ${replayed} of ${events.length} failed event(s) through ${invoke}`);
          if (replayed < events.length) ctx.setExitCode(EXIT.failure);
        });
      });
    });
}

const usage = (command: Command, message: string): never =>
  command.error(`error: ${message}`, { exitCode: EXIT.usage, code: 'outbox.usage' });

/**
 * Invokes the function with each event in turn; once one of an aggregate fails, that aggregate's
 * later events are held (they would wait for it, or be applied ahead of it).
 */
async function invokeInOrder(
  ctx: OperationsContext,
  sql: Sql,
  client: LambdaClient,
  events: FailedEvent[],
  functionName: string,
  o: FailedReplayOptions,
): Promise<Replayed[]> {
  const failedAggregates = new Set<string>();
  const results: Replayed[] = [];
  for (const f of events) {
    const base = { eventId: f.eventId, aggregate: f.aggregate, sequence: f.sequence };
    if (f.aggregate !== '' && failedAggregates.has(f.aggregate)) {
      results.push({ ...base, outcome: 'held', error: 'an earlier event of its aggregate failed' });
      continue;
    }
    const answer = await invokeWithEvent(client, functionName, f.event, o.timeout);
    const { payload } = answer;
    const left = await isStillFailed(sql, f.consumer, f.eventId);
    if (answer.functionError || left) {
      const error = answer.functionError
        ? `the function failed (${answer.functionError}): ${payload.slice(0, 500)}`
        : `the function answered ${payload.slice(0, 200) || 'nothing'} but the event is still failed: is ${functionName} the function of consumer ${f.consumer}?`;
      ctx.err(`${label(f)}: not replayed — ${error}`);
      failedAggregates.add(f.aggregate);
      results.push({ ...base, outcome: 'failed', error });
      continue;
    }
    if (!o.json) ctx.err(`replayed ${label(f)}`);
    results.push({ ...base, outcome: 'applied' });
  }
  return results;
}
