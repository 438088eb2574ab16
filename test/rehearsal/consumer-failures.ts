/**
 * The rehearsal's consumer failure path, in the topology the synthesised template gives the
 * example consumer: an event whose handler fails on every attempt ends in the consumer's failure
 * queue, `outbox inbox queue replay` applies it once after the cause is fixed, and a second replay
 * of it is a duplicate.
 *
 * - direct: the rule's Lambda target; the function's EventInvokeConfig (its retries) run as
 *   Lambda's asynchronous invocation (shared/local/lambda-runtime/async-invocation.ts, Lambda's 1 and 2
 *   minute waits scaled by {@link ASYNC_DELAY_SCALE}), whose invocation record goes to the
 *   on-failure queue;
 * - queue: the rule's SQS target (the event as the message body) and the function's event source
 *   mapping (shared/local/lambda-runtime/sqs-event-source.ts: the template's batch size and partial batch
 *   responses), with the template's RedrivePolicy on the local SQS endpoint moving the message to
 *   the dead-letter queue after `maxReceiveCount` receives. The visibility timeout is shortened to
 *   {@link QUEUE_VISIBILITY_SECONDS}: the failing invocations end in well under a second.
 *
 * The cause is a missing grant (the consumer's role loses INSERT on its own table), fixed by
 * granting it again, as docs/consumer-deploying.md#the-consumers-database-role describes. The queues live on the
 * local SQS endpoint, reached by the real SQS client in the rehearsal and in the CLI; the CLI
 * invokes the consumer's bundle through the local Lambda Invoke endpoint.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import { GetQueueAttributesCommand, SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import type { Sql } from 'postgres';
import { delivery } from '../../dev/delivery.ts';
import { createTemplateQueues } from '../../shared/local/delivery.ts';
import { startLocalLambda } from '../../shared/local/lambda.ts';
import { invokeAsynchronously } from '../../shared/local/lambda-runtime/async-invocation.ts';
import type { InvocationOutcome, RunningFunction } from '../../shared/local/lambda-runtime/lambda-process.ts';
import { SqsEventSource } from '../../shared/local/lambda-runtime/sqs-event-source.ts';
import type { SynthesisedStack, TemplateFunction } from '../../shared/local/lambda-runtime/template.ts';
import { startLocalSqs } from '../../shared/local/sqs.ts';
import { EnvVar } from '../../shared/platform/index.ts';

const exec = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
/** Lambda's waits between asynchronous retries (1 and 2 minutes) are multiplied by this. */
export const ASYNC_DELAY_SCALE = 0.02;
/** The queues' visibility timeout in the rehearsal, seconds (the template's is minutes). */
export const QUEUE_VISIBILITY_SECONDS = 2;

/** What the caller (run.ts, direct.ts) provides. */
export interface ConsumerFailureContext {
  stack: SynthesisedStack;
  stackName: string;
  region: string;
  account: string;
  consumer: TemplateFunction;
  consumerFn: RunningFunction;
  invoke(
    fn: RunningFunction,
    f: TemplateFunction,
    event: unknown,
    timeoutMs: number,
  ): Promise<InvocationOutcome>;
  /** The consumer's timeout in the rehearsal, ms. */
  timeoutMs: number;
  /** A connection as the database's owner (to revoke and grant). */
  db: Sql;
  /** Prefix of the check names ('' or 'direct: '). */
  shape: string;
  check(ok: boolean, name: string, detail?: string): boolean;
  info(line: string): void;
}

/** The URL of the owner's connection (postgres.js keeps its options). */
function urlOf(db: Sql): string {
  const o = (
    db as unknown as {
      options: { host: string[]; port: number[]; user: string; pass: string; database: string };
    }
  ).options;
  // The rehearsal's Postgres takes TCP logins over TLS only (hostssl).
  return `postgres://${encodeURIComponent(o.user)}:${encodeURIComponent(o.pass)}@${o.host[0]}:${o.port[0]}/${o.database}?sslmode=require`;
}

/** Runs the failure path; each step is a check. */
export async function rehearseConsumerFailures(c: ConsumerFailureContext): Promise<void> {
  const { stack, consumer } = c;
  const mapping = stack.eventSources.find((e) => e.functionLogicalId === consumer.logicalId);
  const topology = mapping ? 'queue' : 'direct';
  const asyncConfig = stack.asyncConfigs.find((a) => a.functionLogicalId === consumer.logicalId);
  const rule = stack.rules.find((r) =>
    r.targets.some((t) => t.logicalId === (mapping ? mapping.queueLogicalId : consumer.logicalId)),
  );
  const target = rule?.targets.find(
    (t) => t.logicalId === (mapping ? mapping.queueLogicalId : consumer.logicalId),
  );
  const failureQueueId = mapping
    ? stack.queues.find((q) => q.logicalId === mapping.queueLogicalId)?.redrive?.deadLetterLogicalId
    : asyncConfig?.onFailureQueueLogicalId;
  if (
    !c.check(
      Boolean(rule && target?.deadLetterQueueLogicalId && failureQueueId),
      `${c.shape}the template wires the consumer's ${topology} topology: rule, failure queue, dead-letter queue`,
      `rule ${rule?.logicalId}, target ${target?.kind} ${target?.logicalId}, failure queue ${failureQueueId}, dead-letter queue ${target?.deadLetterQueueLogicalId}`,
    ) ||
    !rule ||
    !target?.deadLetterQueueLogicalId ||
    !failureQueueId
  ) {
    return;
  }

  const sqsEndpoint = await startLocalSqs();
  const lambdaEndpoint = await startLocalLambda({
    functions: { [consumer.logicalId]: { environment: consumer.environment } },
    onInvoke: async (i) => {
      const outcome = await c.invoke(c.consumerFn, consumer, i.payload, c.timeoutMs);
      if (outcome.type !== 'result') throw new Error(String(outcome.error ?? outcome.type).split('\n')[0]);
      return outcome.result;
    },
  });
  const sqs = new SQSClient({
    endpoint: sqsEndpoint.url,
    region: c.region,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
  try {
    // The template's queues, the visibility timeout shortened (the failing invocations end fast).
    const urls = createTemplateQueues(sqsEndpoint, stack, () => QUEUE_VISIBILITY_SECONDS);
    const arn = (name: string) => `arn:aws:sqs:${c.region}:${c.account}:${name}`;
    const failureQueue = urls.get(failureQueueId) as string;
    const deadLetterQueue = urls.get(target.deadLetterQueueLogicalId) as string;
    const visible = async (url: string) => {
      const answer = await sqs.send(
        new GetQueueAttributesCommand({
          QueueUrl: url,
          AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'],
        }),
      );
      return (
        Number(answer.Attributes?.ApproximateNumberOfMessages ?? 0) +
        Number(answer.Attributes?.ApproximateNumberOfMessagesNotVisible ?? 0)
      );
    };

    // An event the rule matches, for an order of its own.
    const sources = (rule.pattern.source ?? []) as string[];
    const types = (rule.pattern['detail-type'] ?? []) as string[];
    const orderId = `rehearsal-failing-${topology}`;
    const event = delivery({
      detailType: types[0] ?? 'OrderPlaced',
      source: sources[0] ?? 'demo.shop',
      region: c.region,
      account: c.account,
      metadata: { aggregateId: orderId, sequence: 1, typeSequence: 1 },
      data: { orderId, total: 12 },
    });
    const role = consumer.environment[EnvVar.pgUser] ?? '';
    const invoices = async () =>
      (
        await c.db<
          { n: number }[]
        >`select count(*)::int as n from billing_invoice where order_id = ${orderId}`
      )[0]?.n ?? -1;

    // The cause: the consumer's role cannot write its own table.
    await c.db.unsafe(`revoke insert on billing_invoice from "${role}"`);
    let attempts: string[] = [];
    if (topology === 'direct') {
      const result = await invokeAsynchronously(event, {
        attempt: (e) => c.invoke(c.consumerFn, consumer, e, c.timeoutMs),
        maximumRetryAttempts: asyncConfig?.maximumRetryAttempts ?? 2,
        delayScale: ASYNC_DELAY_SCALE,
        functionArn: `arn:aws:lambda:${c.region}:${c.account}:function:${consumer.logicalId}`,
        onFailure: { sqs, queueUrl: failureQueue },
      });
      attempts = result.attempts.map((a) =>
        a.type === 'result' ? 'ok' : (String(a.error).split('\n')[0] ?? a.type),
      );
    } else if (mapping) {
      const source = new SqsEventSource({
        sqs,
        queueUrl: urls.get(mapping.queueLogicalId) as string,
        queueArn: arn(stack.queues.find((q) => q.logicalId === mapping.queueLogicalId)?.name ?? ''),
        region: c.region,
        batchSize: mapping.batchSize,
        reportBatchItemFailures: mapping.reportBatchItemFailures,
        invoke: (e) => c.invoke(c.consumerFn, consumer, e, c.timeoutMs),
      });
      // What the rule target does: the whole event as the message body.
      await sqs.send(
        new SendMessageCommand({
          QueueUrl: urls.get(mapping.queueLogicalId),
          MessageBody: JSON.stringify(event),
        }),
      );
      const deadline = Date.now() + 60_000;
      while (Date.now() < deadline && (await visible(failureQueue)) === 0) {
        const batch = await source.poll();
        if (batch.received === 0) await sleep(200);
      }
      attempts = source.batches.map((b) =>
        b.kept > 0
          ? `kept ${b.kept} (${JSON.stringify(b.outcome?.result ?? b.outcome?.error ?? '').slice(0, 120)})`
          : 'deleted',
      );
    }
    const [trace] = await c.db<{ n: number }[]>`
      select count(*)::int as n from outbox.inbox_failed where consumer = 'billing' and event_id = ${(event.detail as { metadata: { eventId: string } }).metadata.eventId}`;
    c.check(
      (await visible(failureQueue)) === 1 && (await invoices()) === 0 && trace?.n === 1,
      `${c.shape}${topology} topology: an event whose handler fails on every attempt ends in the failure queue`,
      `${attempts.length} attempts (${[...new Set(attempts)].join('; ').slice(0, 200)}); ${await visible(failureQueue)} message in ${failureQueueId}, its inbox_failed trace ${trace?.n === 1 ? 'kept' : 'missing'}`,
    );

    // The fix, then the replay from both failure queues.
    await c.db.unsafe(`grant insert on billing_invoice to "${role}"`);
    const replay = async () => {
      const { stdout } = await exec(
        process.execPath,
        [
          join(root, 'shared', 'relay', 'bin', 'outbox.js'),
          ...['inbox', 'queue', 'replay', '--queue-url', failureQueue, '--queue-url', deadLetterQueue],
          ...['--consumer', 'billing', '--function-name', consumer.logicalId, '--yes', '--json'],
        ],
        {
          env: {
            PATH: process.env.PATH ?? '',
            HOME: process.env.HOME ?? '',
            AWS_REGION: c.region,
            AWS_ACCESS_KEY_ID: 'local',
            AWS_SECRET_ACCESS_KEY: 'local',
            AWS_EC2_METADATA_DISABLED: 'true',
            AWS_ENDPOINT_URL_SQS: sqsEndpoint.url,
            AWS_ENDPOINT_URL_LAMBDA: lambdaEndpoint.url,
            // The replay reads the inbox's failure traces to tell what the function took.
            DATABASE_URL: urlOf(c.db),
          },
          timeout: 120_000,
        },
      ).catch((error: { stdout?: string; stderr?: string }) => {
        throw new Error(`outbox inbox queue replay failed: ${error.stderr ?? ''} ${error.stdout ?? ''}`);
      });
      return JSON.parse(stdout) as { replayed: number; of: number; events: { outcome: string }[] };
    };
    const first = await replay();
    c.check(
      first.replayed === 1 &&
        first.events[0]?.outcome === 'applied' &&
        (await invoices()) === 1 &&
        (await visible(failureQueue)) === 0,
      `${c.shape}${topology} topology: outbox inbox queue replay applies it once, after the fix, and empties the queue`,
      `replayed ${first.replayed} of ${first.of} (${first.events.map((e) => e.outcome).join(', ')}); ${await invoices()} invoice; ${await visible(failureQueue)} left`,
    );
    // The same event in the queue again (a copy, as at-least-once delivery can leave): a duplicate.
    const copy = topology === 'direct' ? deadLetterQueue : failureQueue;
    await sqs.send(new SendMessageCommand({ QueueUrl: copy, MessageBody: JSON.stringify(event) }));
    const second = await replay();
    c.check(
      second.replayed === 1 &&
        second.events[0]?.outcome === 'duplicate' &&
        (await invoices()) === 1 &&
        (await visible(copy)) === 0,
      `${c.shape}${topology} topology: a second replay of it is a duplicate`,
      `${second.events.map((e) => e.outcome).join(', ')}; ${await invoices()} invoice`,
    );
  } finally {
    sqs.destroy();
    await lambdaEndpoint.close();
    await sqsEndpoint.close();
  }
}
