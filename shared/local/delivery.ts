/**
 * Local delivery: the local bus's events handed to the consumers of a synthesised CDK app as AWS
 * would hand them, for `outbox bus --deliver` (shared/relay/cli/bus-command.ts). Everything comes
 * from the template (lambda-runtime/template.ts), as the deployment rehearsal reads it, and each
 * consumer runs the bundle `cdk synth` wrote, in a Node process of its own per execution
 * environment (lambda-runtime/lambda-service.ts):
 *
 * - a rule (`AWS::Events::Rule`, its `EventPattern` evaluated by event-pattern.ts) with a Lambda
 *   target: Lambda's asynchronous invocation (lambda-runtime/async-invocation.ts) with the
 *   function's `EventInvokeConfig` (`MaximumRetryAttempts`, waits of about 1 and 2 minutes, times
 *   `retryDelayScale`) and, after the last failure, its invocation record in the on-failure queue;
 * - a rule with an SQS target: the event as the message body, and the function's event source
 *   mapping (lambda-runtime/sqs-event-source.ts: the template's batch size, partial batch responses)
 *   polling it, the queue's redrive policy moving a message to its dead-letter queue after
 *   `maxReceiveCount` receives (the visibility timeout times `retryDelayScale`, at least 1 s);
 * - a Custom Event Bus subscriber (`AWS::EventsV2::Subscriber`): the local subscriber
 *   (subscriber.ts), FIFO per `EventGroupId`, its filters, retry policy and dead-letter queue;
 * - a local Lambda Invoke endpoint (lambda.ts) that knows each consumer function by its logical id
 *   and by its consumer's name (`OUTBOX_INBOX_CONSUMER`), for `outbox inbox failed replay
 *   --function-name` (`AWS_ENDPOINT_URL_LAMBDA`), and a local SQS (sqs.ts) holding the template's
 *   queues, for `outbox inbox queue list|replay` (`AWS_ENDPOINT_URL_SQS`).
 *
 * The functions log in to the database of the environment given (`DATABASE_URL`, or `PG*`): the
 * template's login (the proxy's host, the consumer's role with an IAM token, Lambda's CA bundle)
 * is dropped, since none of it exists on this machine.
 */
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { SendMessageCommand, SQSClient } from '@aws-sdk/client-sqs';
import { EnvVar } from '../platform/names.ts';
import type { AcceptedEvent, LocalBus } from './bus.ts';
import { checkEventPattern, matchesEventPattern } from './event-pattern.ts';
import { type LocalLambda, startLocalLambda } from './lambda.ts';
import { invokeAsynchronously } from './lambda-runtime/async-invocation.ts';
import type { InvocationOutcome } from './lambda-runtime/lambda-process.ts';
import { LambdaService } from './lambda-runtime/lambda-service.ts';
import { SqsEventSource } from './lambda-runtime/sqs-event-source.ts';
import { readStack, type SynthesisedStack, type TemplateFunction } from './lambda-runtime/template.ts';
import { ACCOUNT, REGION } from './sqs/queues.ts';
import { type LocalSqs, startLocalSqs } from './sqs.ts';
import { type LocalSubscriber, rawEvent, sqsDeadLetter, startSubscriber } from './subscriber.ts';

/** The template's database login of a function, which the local run replaces with its own. */
const TEMPLATE_LOGIN = [
  EnvVar.databaseUrl,
  EnvVar.pgHost,
  EnvVar.pgPort,
  EnvVar.pgUser,
  EnvVar.pgDatabase,
  'PGPASSWORD',
  EnvVar.iamAuth,
  EnvVar.dbPooler,
  EnvVar.nodeExtraCaCerts,
];

/**
 * The stacks of a cloud assembly (`cdk synth`'s output folder), read from its manifest, each with
 * the values only a deployment knows left out (`unresolved`).
 * @param names the stacks to read (by name or display name); default every stack of the assembly
 * @throws Error when the folder holds no cloud assembly, or a name is not one of its stacks
 */
export async function readCloudAssembly(
  folder: string,
  names: string[] = [],
): Promise<{ name: string; stack: SynthesisedStack }[]> {
  // Absolute: each function runs in its asset folder, its task root.
  const dir = resolve(folder);
  let manifest: {
    artifacts?: Record<
      string,
      { type: string; displayName?: string; properties?: { templateFile?: string } }
    >;
  };
  try {
    manifest = JSON.parse(await readFile(join(dir, 'manifest.json'), 'utf8'));
  } catch {
    throw new Error(
      `${dir} holds no cloud assembly (manifest.json): run \`npx cdk synth\` first, or name cdk synth's output folder`,
    );
  }
  const stacks = Object.entries(manifest.artifacts ?? {}).filter(
    ([, a]) => a.type === 'aws:cloudformation:stack',
  );
  for (const name of names) {
    if (!stacks.some(([id, a]) => id === name || a.displayName === name)) {
      throw new Error(
        `${dir} has no stack ${name} (it has ${stacks.map(([id]) => id).join(', ') || 'none'})`,
      );
    }
  }
  const chosen =
    names.length === 0
      ? stacks
      : stacks.filter(([id, a]) => names.includes(id) || names.includes(a.displayName ?? ''));
  const standIns = {
    region: REGION,
    account: ACCOUNT,
    proxyEndpoint: 'localhost',
    instanceAddress: 'localhost',
    instancePort: 5432,
  };
  return Promise.all(
    chosen.map(async ([id, a]) => ({
      name: id,
      stack: await readStack(dir, id, standIns, {
        unresolved: 'omit',
        templateFile: a.properties?.templateFile ?? `${id}.template.json`,
      }),
    })),
  );
}

/** Options of {@link startLocalDelivery}. */
export interface LocalDeliveryOptions {
  bus: LocalBus;
  /** The synthesised stacks (every consumer of each is attached). */
  stacks: { name: string; stack: SynthesisedStack }[];
  /** The ARN the relay publishes to on the local Custom Event Bus; its subscribers deliver it. */
  customEventBusArn: string;
  /** The functions' database login (`DATABASE_URL` or `PG*`) and anything else set over the template's. */
  environment: Record<string, string>;
  /** Multiplies Lambda's asynchronous retry waits (60 s, then 120 s) and the queues' visibility timeouts. Default 1. */
  retryDelayScale?: number;
  /** One line per delivery, attempt, retry and failure record, and each line a function logs. */
  log: (line: string) => void;
}

/** A consumer function the delivery runs. */
export interface DeliveredConsumer {
  /** `OUTBOX_INBOX_CONSUMER`, else the function's logical id. */
  name: string;
  /** The names the local Lambda endpoint knows it by (its logical id, its consumer's name). */
  functionNames: string[];
  /** `direct` (a rule's Lambda target), `queue` (an SQS queue and an event source mapping), `subscriber`. */
  topology: 'direct' | 'queue' | 'subscriber';
  /** The queues of its failures, by role, as URLs of the local SQS. */
  queues: Record<string, string>;
  /** How its failed deliveries are retried, in words. */
  retries: string;
}

/** A running local delivery. */
export interface LocalDelivery {
  /** For `AWS_ENDPOINT_URL_LAMBDA`. */
  lambdaUrl: string;
  /** For `AWS_ENDPOINT_URL_SQS`. */
  sqsUrl: string;
  consumers: DeliveredConsumer[];
  /** Resolves once no delivery is in progress (attempts, retries waiting, queues with messages in flight). */
  idle(timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/** A function's name in a name, a partial ARN (`name:qualifier`) or an ARN. */
function functionNameOf(identifier: string): string {
  const parts = identifier.split(':');
  return (identifier.startsWith('arn:') ? parts[6] : parts[0]) ?? identifier;
}

/** What a log line says of an event: its type, aggregate and sequence. */
function describe(event: { 'detail-type'?: string; detail?: unknown }): string {
  const m = (event.detail as { metadata?: Record<string, unknown> } | undefined)?.metadata;
  return m
    ? `${event['detail-type']} ${m.aggregateType}/${m.aggregateId} #${m.sequence}`
    : String(event['detail-type']);
}

/** The first line of an invocation's error (`InboxGapError: …`). */
function failure(outcome: InvocationOutcome): string {
  if (outcome.type === 'timeout') return `timed out after ${(outcome.durationMs / 1000).toFixed(1)} s`;
  return String(outcome.error ?? 'failed').split('\n')[0] ?? 'failed';
}

/**
 * Creates the template's queues on the local SQS, dead-letter queues first (a redrive policy names
 * an existing queue), each under the name its ARN resolves to; returns their URLs by logical id.
 * @param visibilitySeconds each queue's visibility timeout on the local SQS (the template's by default)
 */
export function createTemplateQueues(
  sqs: LocalSqs,
  stack: SynthesisedStack,
  visibilitySeconds: (templateSeconds: number) => number = (s) => s,
): Map<string, string> {
  const urls = new Map<string, string>();
  const ordered = [...stack.queues].sort((a, b) => Number(Boolean(a.redrive)) - Number(Boolean(b.redrive)));
  for (const q of ordered) {
    const dlq = q.redrive
      ? stack.queues.find((d) => d.logicalId === q.redrive?.deadLetterLogicalId)
      : undefined;
    urls.set(
      q.logicalId,
      sqs.createQueue(q.name, {
        VisibilityTimeout: String(visibilitySeconds(q.visibilityTimeoutSeconds)),
        MessageRetentionPeriod: String(q.retentionSeconds),
        ...(q.redrive && dlq
          ? {
              RedrivePolicy: JSON.stringify({
                deadLetterTargetArn: `arn:aws:sqs:${REGION}:${ACCOUNT}:${dlq.name}`,
                maxReceiveCount: q.redrive.maxReceiveCount,
              }),
            }
          : {}),
      }),
    );
  }
  return urls;
}

/**
 * Attaches the stacks' consumers to the bus (see the module's comment).
 * @throws Error naming a rule or subscriber whose pattern uses a filter the local delivery does not evaluate
 */
export async function startLocalDelivery(o: LocalDeliveryOptions): Promise<LocalDelivery> {
  const scale = o.retryDelayScale ?? 1;
  const abort = new AbortController();
  const sqsEndpoint = await startLocalSqs();
  const sqs = new SQSClient({
    endpoint: sqsEndpoint.url,
    region: REGION,
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
  const services = new Map<string, { service: LambdaService; fn: TemplateFunction; label: string }>();
  const byName = new Map<string, string>();
  const consumers: DeliveredConsumer[] = [];
  const pending = new Set<Promise<unknown>>();
  const subscribers: LocalSubscriber[] = [];
  const pollers: Promise<void>[] = [];
  const rules: { pattern: Record<string, never>; deliver: (event: ReturnType<typeof rawEvent>) => void }[] =
    [];
  const track = (p: Promise<unknown>) => {
    pending.add(p);
    void p.catch(() => {}).finally(() => pending.delete(p));
  };
  const environment = (fn: TemplateFunction) => {
    const env = { ...fn.environment };
    for (const name of TEMPLATE_LOGIN) delete env[name];
    return { ...env, ...o.environment };
  };
  /** The function's service, started once (its environments start on their first invocation). */
  const serviceOf = (key: string, fn: TemplateFunction) => {
    const label = fn.environment[EnvVar.inboxConsumer] ?? fn.logicalId;
    let entry = services.get(key);
    if (!entry) {
      const service = new LambdaService({
        spec: {
          name: fn.logicalId,
          assetDir: fn.assetDir,
          handler: fn.handler,
          memoryMb: fn.memoryMb,
          environment: environment(fn),
          onLog: (line) => o.log(`${label} | ${line}`),
        },
        baseEnv: {
          AWS_REGION: REGION,
          AWS_DEFAULT_REGION: REGION,
          AWS_ACCESS_KEY_ID: 'local',
          AWS_SECRET_ACCESS_KEY: 'local',
          AWS_EC2_METADATA_DISABLED: 'true',
        },
        timeoutMs: fn.timeoutSeconds * 1000,
      });
      entry = { service, fn, label };
      services.set(key, entry);
      byName.set(fn.logicalId, key);
      if (fn.environment[EnvVar.inboxConsumer])
        byName.set(fn.environment[EnvVar.inboxConsumer] as string, key);
    }
    return entry;
  };
  const invoke = async (entry: { service: LambdaService }, event: unknown) => {
    try {
      return (await entry.service.invoke(event)).outcome;
    } catch (error) {
      // The bundle's import failed (its cold start): a failed invocation, as Lambda reports an init error.
      return {
        type: 'error',
        error: String((error as Error).message),
        durationMs: 0,
        peakRss: 0,
      } as InvocationOutcome;
    }
  };

  for (const { name: stackName, stack } of o.stacks) {
    const functions = new Map(stack.functions.map((f) => [f.logicalId, f]));
    const queueUrls = createTemplateQueues(sqsEndpoint, stack, (s) => Math.max(1, Math.round(s * scale)));
    const queueName = (id: string | undefined) => (id ? queueUrls.get(id) : undefined);

    for (const rule of stack.rules) {
      try {
        checkEventPattern(rule.pattern);
      } catch (error) {
        throw new Error(`${stackName}/${rule.logicalId}: ${(error as Error).message}`);
      }
      for (const t of rule.targets) {
        if (t.kind === 'lambda') {
          const fn = functions.get(t.logicalId);
          if (!fn) continue;
          const entry = serviceOf(`${stackName}/${fn.logicalId}`, fn);
          const config = stack.asyncConfigs.find((a) => a.functionLogicalId === fn.logicalId);
          const retries = config?.maximumRetryAttempts ?? 2;
          const onFailure = queueName(config?.onFailureQueueLogicalId);
          consumers.push({
            name: entry.label,
            functionNames: [],
            topology: 'direct',
            queues: {
              ...(onFailure ? { 'on-failure': onFailure } : {}),
              ...(queueName(t.deadLetterQueueLogicalId)
                ? { 'dead-letter': queueName(t.deadLetterQueueLogicalId) as string }
                : {}),
            },
            retries: `Lambda's ${retries} asynchronous retr${retries === 1 ? 'y' : 'ies'} after ${[60, 120]
              .slice(0, retries)
              .map((s) => `${+(s * scale).toFixed(2)} s`)
              .join(' and ')}${onFailure ? ', then the on-failure queue' : ''}`,
          });
          rules.push({
            pattern: rule.pattern as Record<string, never>,
            deliver: (event) => {
              const what = describe(event);
              track(
                invokeAsynchronously(event, {
                  attempt: async (e) => {
                    const outcome = await invoke(entry, e);
                    if (outcome.type === 'result')
                      o.log(`${entry.label} ← ${what}: ${JSON.stringify(outcome.result)}`);
                    return outcome;
                  },
                  maximumRetryAttempts: retries,
                  delayScale: scale,
                  functionArn: `arn:aws:lambda:${REGION}:${ACCOUNT}:function:${fn.logicalId}`,
                  onFailure: onFailure ? { sqs, queueUrl: onFailure } : undefined,
                  onRetry: (n, waitMs, failed) =>
                    o.log(
                      `${entry.label} ← ${what}: failed (${failure(failed)}); Lambda retries it (${n} of ${retries}) in ${+(waitMs / 1000).toFixed(2)} s`,
                    ),
                  signal: abort.signal,
                }).then(({ attempts, record }) => {
                  const last = attempts.at(-1);
                  if (!last || last.type === 'result' || abort.signal.aborted) return;
                  o.log(
                    `${entry.label} ← ${what}: failed (${failure(last)}) on every attempt (${attempts.length}): ${record && onFailure ? `its invocation record is in the on-failure queue ${onFailure}` : 'dropped, no on-failure destination'}`,
                  );
                }),
              );
            },
          });
        } else {
          const url = queueUrls.get(t.logicalId);
          const mapping = stack.eventSources.find((e) => e.queueLogicalId === t.logicalId);
          const fn = mapping ? functions.get(mapping.functionLogicalId) : undefined;
          if (!url) continue;
          rules.push({
            pattern: rule.pattern as Record<string, never>,
            // What the rule's SQS target does: the whole event as the message body.
            deliver: (event) =>
              track(sqs.send(new SendMessageCommand({ QueueUrl: url, MessageBody: JSON.stringify(event) }))),
          });
          if (!mapping || !fn) continue;
          const entry = serviceOf(`${stackName}/${fn.logicalId}`, fn);
          const queue = stack.queues.find((q) => q.logicalId === t.logicalId);
          const dlq = queueName(queue?.redrive?.deadLetterLogicalId);
          const visibility = Math.max(1, Math.round((queue?.visibilityTimeoutSeconds ?? 30) * scale));
          consumers.push({
            name: entry.label,
            functionNames: [],
            topology: 'queue',
            queues: {
              queue: url,
              ...(dlq ? { 'dead-letter (of the queue)': dlq } : {}),
              ...(queueName(t.deadLetterQueueLogicalId)
                ? { 'dead-letter (of the rule target)': queueName(t.deadLetterQueueLogicalId) as string }
                : {}),
            },
            retries: `batches of ${mapping.batchSize}${mapping.reportBatchItemFailures ? ' with partial batch responses' : ''}; a failed message is received again after ${visibility} s, ${queue?.redrive ? `${queue.redrive.maxReceiveCount} receives in all, then the dead-letter queue` : 'until it expires'}`,
          });
          const source = new SqsEventSource({
            sqs,
            queueUrl: url,
            queueArn: `arn:aws:sqs:${REGION}:${ACCOUNT}:${queue?.name ?? t.logicalId}`,
            region: REGION,
            batchSize: mapping.batchSize,
            reportBatchItemFailures: mapping.reportBatchItemFailures,
            invoke: async (e) => {
              const outcome = await invoke(entry, e);
              const records = (e as { Records: { body: string }[] }).Records;
              const what = records.map((r) => describe(JSON.parse(r.body))).join(', ');
              o.log(
                `${entry.label} ← batch of ${records.length} (${what}): ${outcome.type === 'result' ? JSON.stringify(outcome.result) : `failed (${failure(outcome)})`}`,
              );
              return outcome;
            },
          });
          pollers.push(
            (async () => {
              // Not tracked by idle(): a poll is always waiting. A failed poll (the endpoint closing) waits a moment.
              while (!abort.signal.aborted) {
                const batch = await source.poll().catch(() => undefined);
                if (!batch) await new Promise((r) => setTimeout(r, 200));
              }
            })(),
          );
        }
      }
    }

    for (const s of stack.subscribers) {
      const fn = functions.get(s.functionLogicalId);
      if (!fn) continue;
      for (const f of s.filters) {
        try {
          checkEventPattern(f.pattern);
        } catch (error) {
          throw new Error(`${stackName}/${s.logicalId}: ${(error as Error).message}`);
        }
      }
      const entry = serviceOf(`${stackName}/${fn.logicalId}`, fn);
      const dlq = queueName(s.deadLetterQueueLogicalId);
      consumers.push({
        name: entry.label,
        functionNames: [],
        topology: 'subscriber',
        queues: dlq ? { 'dead-letter': dlq } : {},
        retries: `${s.type} subscriber: up to ${s.maxRetryAttempts} retries within ${s.maxEventAgeSeconds} s${dlq ? ', then a dead-letter record (no payload)' : ''}`,
      });
      subscribers.push(
        startSubscriber({
          bus: o.bus,
          eventBusArn: o.customEventBusArn,
          type: s.type,
          name: s.logicalId,
          transformer: s.transformer,
          retryPolicy: {
            maxRetryAttempts: Math.min(185, s.maxRetryAttempts),
            maxEventAgeSeconds: s.maxEventAgeSeconds,
          },
          filter: (e) =>
            s.filters.every((f) =>
              matchesEventPattern(
                f.pattern,
                f.scope === 'DATA'
                  ? rawEvent(e)
                  : { 'aws:Source': e.source, 'aws:DetailType': e.detailType, EventGroupId: e.eventGroupId },
              ),
            ),
          deadLetter: dlq ? sqsDeadLetter(sqs, dlq) : undefined,
          target: async (payload) => {
            const what = describe('Data' in payload ? payload.Data : payload);
            const outcome = await invoke(entry, payload);
            if (outcome.type !== 'result') {
              o.log(`${entry.label} ← ${what}: failed (${failure(outcome)}); the subscriber retries it`);
              const [name, ...message] = failure(outcome).split(': ');
              const error = new Error(message.join(': ') || name);
              error.name = message.length > 0 ? (name as string) : 'Error';
              throw error;
            }
            o.log(`${entry.label} ← ${what}: ${JSON.stringify(outcome.result)}`);
            return outcome.result;
          },
        }),
      );
    }
  }

  for (const c of consumers) {
    c.functionNames = [...byName.entries()]
      .filter(([, key]) => services.get(key)?.label === c.name)
      .map(([name]) => name);
  }
  const lambda: LocalLambda = await startLocalLambda({
    functions: Object.fromEntries(
      [...byName.entries()].map(([name, key]) => [
        name,
        { environment: environment(services.get(key)?.fn as TemplateFunction) },
      ]),
    ),
    onInvoke: async (i) => {
      const entry = services.get(byName.get(functionNameOf(i.functionName)) ?? '');
      if (!entry) throw new Error(`Function not found: ${i.functionName}`);
      const outcome = await invoke(entry, i.payload);
      o.log(
        `${entry.label} ← ${describe(i.payload as object)} (Invoke): ${outcome.type === 'result' ? JSON.stringify(outcome.result) : `failed (${failure(outcome)})`}`,
      );
      if (outcome.type !== 'result') throw new Error(failure(outcome));
      return outcome.result;
    },
  });

  const onAccepted = (e: AcceptedEvent) => {
    // Rules are the classic bus's; the Custom Event Bus's events go to its subscribers.
    if (e.eventBusName?.includes(':event-busv2/')) return;
    const event = rawEvent(e);
    for (const rule of rules) if (matchesEventPattern(rule.pattern, event)) rule.deliver(event);
  };
  o.bus.emitter.on('accepted', onAccepted);

  return {
    lambdaUrl: lambda.url,
    sqsUrl: sqsEndpoint.url,
    consumers,
    async idle(timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      while (pending.size > 0 && Date.now() < deadline)
        await Promise.race([...pending, new Promise((r) => setTimeout(r, 50))]);
      await Promise.all(subscribers.map((s) => s.idle(Math.max(1, deadline - Date.now()))));
    },
    async close() {
      o.bus.emitter.off('accepted', onAccepted);
      abort.abort();
      await Promise.all(subscribers.map((s) => s.close()));
      await Promise.allSettled(pollers);
      await Promise.all([...services.values()].map((s) => s.service.stop({ wait: false })));
      await lambda.close();
      sqs.destroy();
      await sqsEndpoint.close();
    },
  };
}
