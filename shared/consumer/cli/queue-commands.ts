/**
 * `outbox inbox queue list|replay --queue-url <url>…`: a consumer's failure queues (the
 * OutboxConsumer construct's `failedEventsQueue` and `deadLetterQueue`), read back and replayed.
 *
 * `list` receives every message (hidden for `--visibility-timeout` seconds while it reads), prints
 * the events in the order a replay would take them, and makes the messages visible again.
 *
 * `replay` invokes the consumer's function with each event (RequestResponse: each result is seen
 * before the next is sent), aggregate by aggregate in `sequence` order, across all the queues given
 * (an aggregate's events can be split between the on-failure queue and the dead-letter queue), and
 * deletes the messages of each event the function took: applied, or acknowledged by the inbox as a
 * duplicate, stale or parked. After a failure the aggregate's later events are held (they would
 * wait for it, or be applied ahead of it); the other aggregates go on. What was not taken is made
 * visible again, so running the command again resumes. The function is the same in both
 * topologies: `sqsBatch` passes a single EventBridge event straight to the inbox.
 *
 * Why invoke the function rather than put the events back on the bus or redrive the queue: the
 * result of each is known here, in each chain's order, and no other rule of the bus sees them twice.
 */
import type { LambdaClient } from '@aws-sdk/client-lambda';
import type { SQSClient } from '@aws-sdk/client-sqs';
import type { Command } from 'commander';
import { EXIT } from '../../platform/cli/errors.ts';
import { positiveInteger, visibilitySeconds } from '../../platform/cli/parsers.ts';
import type { OperationsContext } from '../../platform/cli/program.ts';
import { onInterrupt } from '../../platform/cli/signals.ts';
import { isStillFailed } from '../operations/index.ts';
import { deleteMessages, receiveAll, release, withSqs } from './failure-queue-client.ts';
import {
  type QueuedEvent,
  queueName,
  type ReplayItem,
  readQueueMessage,
  replayOrder,
} from './failure-queue-messages.ts';
import {
  addInvokeOptions,
  checkFunctionUnlessSkipped,
  type InvokeOptions,
  invokeWithEvent,
  withLambda,
} from './lambda-client.ts';

interface QueueOptions {
  queueUrl: string[];
  max: number;
  visibilityTimeout: number;
  json?: boolean;
}

interface QueueReplayOptions extends QueueOptions, InvokeOptions {
  consumer: string;
  functionName?: string;
  dryRun?: boolean;
  yes?: boolean;
}

/**
 * What became of one event: `applied` (the handler ran), `duplicate`, `stale` or `parked` (the
 * inbox acknowledged it without running the handler: recorded before, superseded, or set aside),
 * `failed` (the function failed, or did not answer in time), `held` (an earlier event of its
 * aggregate failed in this replay, or the replay was interrupted before it).
 */
type QueueOutcome = 'applied' | 'duplicate' | 'stale' | 'parked' | 'failed' | 'held';

/** One event as the commands print it. */
const described = (e: QueuedEvent) => ({
  eventId: e.eventId,
  type: e.type,
  aggregate: e.aggregate,
  // A number while exact, else the decimal string (JSON has no bigint).
  sequence: e.sequence === undefined ? null : displaySequence(e.sequence),
  queue: queueName(e.message.queueUrl),
  messageId: e.message.messageId,
  kind: e.kind,
  receiveCount: e.message.receiveCount,
  sentAt: e.message.sentAt?.toISOString() ?? null,
  error: e.error,
});

const displaySequence = (s: bigint): number | string =>
  s >= BigInt(Number.MIN_SAFE_INTEGER) && s <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(s) : s.toString();

const label = (e: QueuedEvent) =>
  `${e.eventId} (${e.type} ${e.aggregate || '-'} #${e.sequence ?? '?'}, ${queueName(e.message.queueUrl)})`;

const usage = (command: Command, message: string): never =>
  command.error(`error: ${message}`, { exitCode: EXIT.usage, code: 'outbox.usage' });

/** The options both commands take. */
function addQueueOptions(command: Command): Command {
  return command
    .requiredOption(
      '--queue-url <url...>',
      "the consumer's failure queues: its failed-events queue and its dead-letter queue (the stack outputs; repeat or list several)",
    )
    .option('--max <n>', 'read at most this many messages in all', positiveInteger, 1000)
    .option(
      '--visibility-timeout <s>',
      'seconds the messages read stay hidden from other readers; longer than the replay takes (those not replayed are made visible again at the end)',
      visibilitySeconds,
      900,
    );
}

/**
 * Reads the queues; the caller must delete or release every message. When `--max` stopped the
 * reading, says so (and the exit code is 1): the queues may hold more, the later queues perhaps
 * unread, and an aggregate's earlier events among them would be replayed after its later ones.
 */
async function readQueues(ctx: OperationsContext, sqs: SQSClient, o: QueueOptions) {
  const messages = await receiveAll(sqs, o.queueUrl, { max: o.max, visibilityTimeout: o.visibilityTimeout });
  if (messages.length >= o.max) {
    ctx.err(
      `read ${messages.length} message(s), --max: the queues may hold more (those after the first queues perhaps none read), and an aggregate's events among them are not in this order; raise --max to take them all`,
    );
    ctx.setExitCode(EXIT.failure);
  }
  const events = messages.map(readQueueMessage);
  return {
    messages,
    events,
    order: replayOrder(events),
    unreadable: events.filter((e) => e.kind === 'unreadable'),
  };
}

/** Adds `queue list` and `queue replay` to `outbox inbox`. */
export function registerQueueCommands(inbox: Command, ctx: OperationsContext): void {
  const queue = inbox
    .command('queue')
    .description("list or replay the events in a consumer's failure queues (SQS), in each aggregate's order");

  addQueueOptions(queue.command('list'))
    .description('print the events in the queues, in the order a replay would take them; nothing is deleted')
    .option('--json', 'print one JSON document: {"events": [...], "unreadable": [...]}')
    .action(async (o: QueueOptions) => {
      await withSqs(async (sqs) => {
        const { messages, order, unreadable } = await readQueues(ctx, sqs, o);
        try {
          if (o.json) {
            ctx.json({
              events: order.map((i) => ({ ...described(i.first), copies: i.copies.length })),
              unreadable: unreadable.map(described),
            });
            return;
          }
          if (messages.length === 0) {
            ctx.out(`no messages in ${o.queueUrl.map(queueName).join(', ')}`);
            return;
          }
          for (const { first, copies } of order) {
            ctx.out(
              `${label(first)}  ${first.kind}${copies.length > 0 ? ` (+${copies.length} copies)` : ''}  ${first.error}`,
            );
          }
          for (const u of unreadable)
            ctx.out(
              `unreadable message ${u.message.messageId} (${queueName(u.message.queueUrl)}): ${u.error}`,
            );
          ctx.err(
            `${order.length} event(s) in ${messages.length} message(s)${unreadable.length ? `, ${unreadable.length} unreadable` : ''}`,
          );
        } finally {
          await release(sqs, messages);
        }
      });
    });

  const replay = addInvokeOptions(addQueueOptions(queue.command('replay')))
    .description(
      "invoke the consumer's function with the events in its failure queues, in each aggregate's order, once their cause is fixed; deletes what it took",
    )
    .requiredOption(
      '--consumer <name>',
      'the inbox consumer (its `consumer` option), to check the function is its',
    )
    .option('--function-name <name>', "the consumer's Lambda function (name or ARN)")
    .option(
      '--dry-run',
      'print the events in the order they would be invoked, one JSON line each; invoke and delete nothing',
    )
    .option('--yes', 'do not ask for confirmation')
    .option(
      '--json',
      'print one JSON document: {"replayed": n, "of": n, "events": [...], "unreadable": [...]}',
    )
    .action(async (o: QueueReplayOptions) => {
      if (!o.dryRun && !o.functionName)
        usage(replay, 'give --function-name (or --dry-run to see what would be replayed)');
      const functionName = o.dryRun ? undefined : o.functionName;
      await withLambda(functionName, async (lambda) => {
        if (lambda && functionName) await checkFunctionUnlessSkipped(lambda, functionName, o.consumer, o);
        await withSqs(async (sqs) => {
          const { messages, order, unreadable } = await readQueues(ctx, sqs, o);
          const taken: QueuedEvent[] = [];
          try {
            if (!lambda || !functionName) {
              if (o.json)
                ctx.json({
                  replayed: 0,
                  of: order.length,
                  events: order.map((i) => described(i.first)),
                  unreadable: unreadable.map(described),
                });
              else for (const { first } of order) ctx.out(JSON.stringify(first.event));
              if (!o.json)
                ctx.err(
                  `${order.length} event(s), in the order to invoke the function with them (dry run: nothing invoked or deleted)`,
                );
              return;
            }
            if (order.length === 0) {
              if (o.json) ctx.json({ replayed: 0, of: 0, events: [], unreadable: unreadable.map(described) });
              else ctx.out(`no events to replay in ${o.queueUrl.map(queueName).join(', ')}`);
              if (unreadable.length > 0) ctx.setExitCode(EXIT.failure);
              return;
            }
            if (
              order.length > 1 &&
              !o.yes &&
              !(await ctx.confirm(`Replay ${order.length} events through ${functionName}? [y/N] `))
            ) {
              ctx.err('not confirmed: nothing was invoked (use --yes to replay them without asking)');
              ctx.setExitCode(EXIT.failure);
              return;
            }
            // Ctrl-C: stop after the current invocation, so that what was not replayed is made
            // visible again below, rather than left hidden for the visibility timeout; a second
            // one quits at once.
            let interrupted = false;
            const removeInterrupt = onInterrupt(
              () => {
                interrupted = true;
                ctx.err(
                  'interrupted: stopping after the current invocation; the messages not replayed are made visible again (Ctrl-C again to quit at once, leaving them hidden for the visibility timeout)',
                );
              },
              () => process.exit(130),
            );
            let results: Awaited<ReturnType<typeof invokeInOrder>> = [];
            try {
              // The inbox's failure traces tell what the function took: a middleware may answer
              // for a failure with a success (issue 45, item 5).
              await ctx.withDb(async (sql) => {
                results = await invokeInOrder(
                  ctx,
                  lambda,
                  sqs,
                  order,
                  functionName,
                  o,
                  taken,
                  () => interrupted,
                  (eventId) => isStillFailed(sql, o.consumer, eventId),
                );
              });
            } finally {
              removeInterrupt();
            }
            for (const u of unreadable)
              ctx.err(
                `unreadable message ${u.message.messageId} (${queueName(u.message.queueUrl)}) left in its queue: ${u.error}`,
              );
            const count = (outcome: QueueOutcome) => results.filter((r) => r.outcome === outcome).length;
            const replayed = order.length - count('failed') - count('held');
            if (o.json)
              ctx.json({
                replayed,
                of: order.length,
                events: results,
                unreadable: unreadable.map(described),
              });
            else {
              ctx.out(
                `replayed ${replayed} of ${order.length} event(s) through ${functionName}: ${count('applied')} applied, ${count('duplicate')} duplicate, ${count('stale')} stale, ${count('parked')} parked; ${count('failed')} failed, ${count('held')} held and ${unreadable.length} unreadable left in their queues`,
              );
            }
            if (replayed < order.length || unreadable.length > 0) ctx.setExitCode(EXIT.failure);
          } finally {
            const kept = new Set(taken.map((e) => e.message));
            await release(
              sqs,
              messages.filter((m) => !kept.has(m)),
            );
          }
        });
      });
    });
}

/**
 * Invokes the function with each event in turn and deletes the messages of those it took (pushed to
 * `taken`); once one of an aggregate fails, that aggregate's later events are held.
 */
async function invokeInOrder(
  ctx: OperationsContext,
  lambda: LambdaClient,
  sqs: SQSClient,
  order: ReplayItem[],
  functionName: string,
  o: QueueReplayOptions,
  taken: QueuedEvent[],
  interrupted: () => boolean,
  stillFailed: (eventId: string) => Promise<boolean>,
) {
  const failedAggregates = new Set<string>();
  const results: (ReturnType<typeof described> & { outcome: QueueOutcome; result?: string })[] = [];
  for (const { first, copies } of order) {
    const base = described(first);
    if (interrupted()) {
      results.push({ ...base, outcome: 'held', error: 'the replay was interrupted before it' });
      continue;
    }
    if (first.aggregate !== '' && failedAggregates.has(first.aggregate)) {
      results.push({ ...base, outcome: 'held', error: 'an earlier event of its aggregate failed' });
      continue;
    }
    let outcome: QueueOutcome;
    let detail: string;
    try {
      const { functionError, payload } = await invokeWithEvent(lambda, functionName, first.event, o.timeout);
      if (functionError) {
        outcome = 'failed';
        detail = `the function failed (${functionError}): ${payload.slice(0, 500)}`;
      } else if (await stillFailed(first.eventId)) {
        // The inbox traced a failure (inbox_failed) that the function's answer hid: a middleware
        // answered for it with a success. Nothing was taken; the message stays.
        outcome = 'failed';
        detail = `the function answered ${payload.slice(0, 200) || 'nothing'} but the inbox recorded the event as failed (inbox_failed: \`outbox inbox failed list --consumer ${o.consumer}\` shows the error): a middleware answered for the failure`;
      } else {
        outcome = skipOf(payload) ?? 'applied';
        detail = payload.slice(0, 200);
      }
    } catch (error) {
      // No answer: it may or may not have applied. The message stays; a later replay finds it
      // applied (a duplicate) or applies it.
      outcome = 'failed';
      detail = `no answer from the function: ${(error as Error).name}: ${(error as Error).message}`;
    }
    if (outcome === 'failed') {
      ctx.err(`${label(first)}: not replayed — ${detail}`);
      failedAggregates.add(first.aggregate);
      results.push({ ...base, outcome, error: detail });
      continue;
    }
    const messages = [first, ...copies];
    taken.push(...messages);
    const undeleted = await deleteMessages(
      sqs,
      messages.map((m) => m.message),
    );
    for (const u of undeleted) {
      ctx.err(
        `${label(first)}: ${outcome}, but its message ${u.messageId} could not be deleted (${u.reason}); a later replay will find it a duplicate`,
      );
    }
    if (!o.json) ctx.err(`${outcome} ${label(first)}`);
    results.push({ ...base, outcome, result: detail });
  }
  return results;
}

/** The inbox's answer when it did not run the handler (`{ inbox: 'duplicate' | 'stale' | 'parked', eventId }`). */
function skipOf(payload: string): 'duplicate' | 'stale' | 'parked' | undefined {
  try {
    const answer = JSON.parse(payload) as { inbox?: unknown } | null;
    const skip = answer?.inbox;
    return skip === 'duplicate' || skip === 'stale' || skip === 'parked' ? skip : undefined;
  } catch {
    return undefined;
  }
}
