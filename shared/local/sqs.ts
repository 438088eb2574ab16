/**
 * A local Amazon SQS endpoint for tests and the deployment rehearsal: it speaks SQS's AWS JSON 1.0
 * protocol (`POST /`, `X-Amz-Target: AmazonSQS.<Operation>`) so the real `@aws-sdk/client-sqs`
 * client talks to it over HTTP (`AWS_ENDPOINT_URL_SQS`, or the client's `endpoint`), keeps standard
 * queues in memory with SQS's visibility timeouts, delays, retention, long polling and dead-letter
 * redrive, and can inject the faults a real endpoint produces (latency, throttling, 500s, lost
 * responses) from a seeded PRNG, as the local bus does.
 *
 * Operations: CreateQueue, GetQueueUrl, ListQueues, GetQueueAttributes, SetQueueAttributes,
 * SendMessage(Batch), ReceiveMessage, DeleteMessage(Batch), ChangeMessageVisibility(Batch),
 * PurgeQueue. Any other target is answered 400 UnknownOperationException (`InvalidAction`, SQS's
 * common error for an unknown action). Not modelled: FIFO queues, DeleteQueue, tags, policies,
 * KMS, message move tasks, authentication (any credentials are accepted), a standard queue's
 * duplicate deliveries; see `sqs/queues.ts` and `sqs/protocol.ts` for the limits.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { seeded } from './seeded.ts';
import {
  checkBatch,
  checkMessage,
  integerIn,
  invalidParameter,
  type MessageAttributeValue,
  SqsError,
  send,
  sendError,
  sqsError,
} from './sqs/protocol.ts';
import { ACCOUNT, type Queue, Queues, receivedMessage } from './sqs/queues.ts';

export type { MessageAttributeValue } from './sqs/protocol.ts';

/** Fault injection, drawn per request; every rate is a probability in [0, 1]. */
export interface SqsFaults {
  /** Delay before answering, ms: a fixed value or a [min, max] range. */
  latencyMs?: number | [number, number];
  /** Refuse the request with 403 RequestThrottled (the SDK retries it as a throttle). */
  throttleRate?: number;
  /** Answer 500 InternalError (the SDK retries it as a transient error). */
  serverErrorRate?: number;
  /** SendMessage(Batch) and DeleteMessage(Batch) only: do the work, then drop the connection. */
  lostResponseRate?: number;
}

/** Counters of what the endpoint saw. */
export interface SqsStats {
  requests: number;
  /** Requests by operation name (`SendMessage`…), unknown ones included. */
  byOperation: Record<string, number>;
  throttled: number;
  serverErrors: number;
  lostResponses: number;
  /** Requests answered with an SQS error other than an injected fault. */
  errors: number;
}

/** A message as {@link LocalSqs.messages} reports it. Times are ms since the epoch. */
export interface LocalSqsMessage {
  messageId: string;
  body: string;
  messageAttributes: Record<string, MessageAttributeValue>;
  receiveCount: number;
  sentAt: number;
  /** Receivable now: neither delayed nor in flight. */
  visible: boolean;
}

/** Options of {@link startLocalSqs}. */
export interface LocalSqsOptions {
  /** Port on 127.0.0.1; default a free one. */
  port?: number;
  faults?: SqsFaults;
  /** Seed for the fault dice, for repeatable runs. */
  seed?: number;
}

/** A running local SQS endpoint. */
export interface LocalSqs {
  /** `http://127.0.0.1:port`, for `AWS_ENDPOINT_URL_SQS` or the client's `endpoint`. */
  url: string;
  /** `${url}/123456789012/<name>`, the URL SQS's API answers for the queue (whether it exists or not). */
  queueUrl(name: string): string;
  /** Creates a queue as CreateQueue does (same checks and errors) and returns its URL. */
  createQueue(name: string, attributes?: Record<string, string>): string;
  /** Every message of a queue, in send order, visible or not. Throws QueueDoesNotExist. */
  messages(name: string): LocalSqsMessage[];
  readonly stats: SqsStats;
  setFaults(faults: SqsFaults): void;
  /** Deletes every queue, clears the stats and the faults. */
  reset(): void;
  /** Ends long polls (they answer no messages) and closes the server. */
  close(): Promise<void>;
}

type Input = Record<string, unknown>;
type Operation = (input: Input) => unknown;

const emptyStats = (): SqsStats => ({
  requests: 0,
  byOperation: {},
  throttled: 0,
  serverErrors: 0,
  lostResponses: 0,
  errors: 0,
});
const LOSABLE = new Set(['SendMessage', 'SendMessageBatch', 'DeleteMessage', 'DeleteMessageBatch']);
// SendMessageBatch API reference: the batch's messages together may be at most 1 MiB
// (1,048,576 bytes), the same as the largest single message.
const MAX_BATCH_BYTES = 1_048_576;
// PurgeQueue API reference: one purge per queue every 60 seconds.
const PURGE_INTERVAL_MS = 60_000;

/** Starts the endpoint on 127.0.0.1 (a free port unless `port` is given). */
export async function startLocalSqs(options: LocalSqsOptions = {}): Promise<LocalSqs> {
  const random = options.seed === undefined ? Math.random : seeded(options.seed);
  let faults: SqsFaults = { ...options.faults };
  let stats = emptyStats();
  let queues = new Queues();
  let closed = false;
  let url = '';
  const chance = (rate: number | undefined) => rate !== undefined && rate > 0 && random() < rate;
  const queueUrl = (name: string) => `${url}/${ACCOUNT}/${name}`;

  /** The queue a QueueUrl names: its last path segment, under this endpoint's account. */
  const queueOf = (input: Input): Queue => {
    const parts = typeof input.QueueUrl === 'string' ? input.QueueUrl.split('/') : [];
    if (parts.at(-2) !== ACCOUNT) throw sqsError('QueueDoesNotExist', 'The specified queue does not exist.');
    return queues.get(parts.at(-1) ?? '');
  };

  /** One SendMessage(Batch) entry: checked against the queue's size limit, then stored. */
  const sendOne = (queue: Queue, entry: Input) => {
    const attributes = (entry.MessageAttributes ?? {}) as Record<string, MessageAttributeValue>;
    const size = checkMessage(entry.MessageBody, attributes);
    if (size > queue.settings.MaximumMessageSize) {
      throw invalidParameter(
        `One or more parameters are invalid. Reason: Message must be shorter than ${queue.settings.MaximumMessageSize} bytes.`,
      );
    }
    const delay =
      entry.DelaySeconds === undefined ? undefined : integerIn(entry.DelaySeconds, 'DelaySeconds', 0, 900, 0);
    const trace = (entry.MessageSystemAttributes as Record<string, MessageAttributeValue> | undefined)
      ?.AWSTraceHeader?.StringValue;
    return queues.send(queue, entry.MessageBody as string, attributes, delay, trace);
  };

  /** Runs `each` on every entry of a batch; an SqsError fails only that entry, as SQS reports it. */
  const batch = (entries: Input[], each: (entry: Input) => Record<string, unknown>) => {
    const Successful: unknown[] = [];
    const Failed: unknown[] = [];
    for (const entry of entries) {
      try {
        Successful.push({ Id: entry.Id, ...each(entry) });
      } catch (error) {
        if (!(error instanceof SqsError)) throw error;
        Failed.push({
          Id: entry.Id,
          SenderFault: error.status < 500,
          Code: error.code,
          Message: error.message,
        });
      }
    }
    return { Successful, Failed };
  };

  /** ReceiveMessage, with long polling: waits until a message is visible, the wait is up, or close(). */
  const receive = async (input: Input) => {
    const queue = queueOf(input);
    const max = integerIn(input.MaxNumberOfMessages, 'MaxNumberOfMessages', 1, 10, 1);
    const visibility = integerIn(
      input.VisibilityTimeout,
      'VisibilityTimeout',
      0,
      43_200,
      queue.settings.VisibilityTimeout,
    );
    const wait = integerIn(
      input.WaitTimeSeconds,
      'WaitTimeSeconds',
      0,
      20,
      queue.settings.ReceiveMessageWaitTimeSeconds,
    );
    const systemNames = [
      ...((input.MessageSystemAttributeNames as string[]) ?? []),
      ...((input.AttributeNames as string[]) ?? []),
    ];
    const attributeNames = (input.MessageAttributeNames as string[]) ?? [];
    const deadline = Date.now() + wait * 1000;
    for (;;) {
      const taken = queues.receive(queue, max, visibility);
      const remaining = deadline - Date.now();
      if (taken.length > 0 || remaining <= 0 || closed) {
        // SQS leaves Messages out of an empty answer.
        return taken.length === 0
          ? {}
          : { Messages: taken.map((m) => receivedMessage(m, systemNames, attributeNames)) };
      }
      // A send or a visibility change wakes the wait at once; the tick catches a visibility timeout
      // or delay running out, which nothing announces.
      await new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          queue.waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, Math.min(remaining, 100));
        queue.waiters.add(done);
      });
    }
  };

  const operations: Record<string, Operation> = {
    CreateQueue: (i) => ({
      QueueUrl: queueUrl(queues.create(i.QueueName, i.Attributes as Record<string, string>).name),
    }),
    GetQueueUrl: (i) => ({ QueueUrl: queueUrl(queues.get(String(i.QueueName)).name) }),
    ListQueues: (i) => {
      const max = integerIn(i.MaxResults, 'MaxResults', 1, 1000, 1000);
      const start = Number(i.NextToken ?? 0);
      const names = [...queues.byName.keys()]
        .filter((n) => n.startsWith(String(i.QueueNamePrefix ?? '')))
        .sort();
      const page = names.slice(start, start + max);
      const more = i.MaxResults !== undefined && start + max < names.length;
      return { QueueUrls: page.map(queueUrl), ...(more ? { NextToken: String(start + max) } : {}) };
    },
    GetQueueAttributes: (i) => {
      const all = queueOf(i).attributes(Date.now());
      const names = (i.AttributeNames as string[] | undefined) ?? [];
      for (const n of names)
        if (n !== 'All' && !(n in all) && n !== 'RedrivePolicy')
          throw sqsError('InvalidAttributeName', `Unknown Attribute ${n}.`);
      const picked = names.includes('All')
        ? all
        : Object.fromEntries(names.filter((n) => n in all).map((n) => [n, all[n]]));
      return Object.keys(picked).length > 0 ? { Attributes: picked } : {};
    },
    SetQueueAttributes: (i) => {
      const queue = queueOf(i);
      [queue.settings, queue.inert] = queues.settingsFrom(
        i.Attributes as Record<string, string>,
        queue.settings,
        queue.inert,
      );
      queue.lastModifiedAt = Math.floor(Date.now() / 1000);
      return {};
    },
    SendMessage: (i) => sendOne(queueOf(i), i),
    SendMessageBatch: (i) => {
      const queue = queueOf(i);
      const entries = checkBatch(i.Entries) as Input[];
      const total = entries.reduce((sum, e) => sum + safeSize(e), 0);
      if (total > MAX_BATCH_BYTES) {
        throw sqsError(
          'BatchRequestTooLong',
          `Batch requests cannot be longer than ${MAX_BATCH_BYTES} bytes. You have sent ${total} bytes.`,
        );
      }
      return batch(entries, (e) => sendOne(queue, e));
    },
    ReceiveMessage: receive,
    DeleteMessage: (i) => {
      queues.delete(queueOf(i), i.ReceiptHandle);
      return {};
    },
    DeleteMessageBatch: (i) => {
      const queue = queueOf(i);
      return batch(checkBatch(i.Entries) as Input[], (e) => {
        queues.delete(queue, e.ReceiptHandle);
        return {};
      });
    },
    ChangeMessageVisibility: (i) => {
      const queue = queueOf(i);
      queues.changeVisibility(queue, i.ReceiptHandle, requiredVisibility(i.VisibilityTimeout));
      return {};
    },
    ChangeMessageVisibilityBatch: (i) => {
      const queue = queueOf(i);
      return batch(checkBatch(i.Entries) as Input[], (e) => {
        queues.changeVisibility(queue, e.ReceiptHandle, requiredVisibility(e.VisibilityTimeout));
        return {};
      });
    },
    PurgeQueue: (i) => {
      const queue = queueOf(i);
      const now = Date.now();
      if (now - queue.lastPurgeAt < PURGE_INTERVAL_MS) {
        throw sqsError(
          'PurgeQueueInProgress',
          `Only one PurgeQueue operation on ${queue.name} is allowed every 60 seconds.`,
        );
      }
      queue.lastPurgeAt = now;
      queue.messages.length = 0;
      return {};
    },
  };

  const handle = async (req: IncomingMessage, res: ServerResponse, body: string) => {
    const target = String(req.headers['x-amz-target'] ?? '');
    const name = target.startsWith('AmazonSQS.') ? target.slice('AmazonSQS.'.length) : target;
    stats.requests++;
    stats.byOperation[name] = (stats.byOperation[name] ?? 0) + 1;
    const operation =
      req.method === 'POST' && target.startsWith('AmazonSQS.')
        ? Object.hasOwn(operations, name)
          ? operations[name]
          : undefined
        : undefined;
    if (!operation) {
      stats.errors++;
      return sendError(
        res,
        new SqsError(
          'com.amazon.coral.service#UnknownOperationException',
          `Unknown operation ${target}`,
          400,
          'InvalidAction',
        ),
      );
    }
    let input: Input;
    try {
      input = JSON.parse(body || '{}');
    } catch {
      stats.errors++;
      return sendError(
        res,
        new SqsError(
          'com.amazon.coral.service#SerializationException',
          'Request body is not valid JSON',
          400,
          'MalformedInput',
        ),
      );
    }
    await delay(faults, random);
    if (chance(faults.throttleRate)) {
      stats.throttled++;
      return sendError(res, sqsError('RequestThrottled', 'Rate exceeded'));
    }
    if (chance(faults.serverErrorRate)) {
      stats.serverErrors++;
      return sendError(res, sqsError('InternalError', 'We encountered an internal error. Please try again.'));
    }
    let output: unknown;
    try {
      output = await operation(input);
    } catch (error) {
      if (!(error instanceof SqsError)) throw error;
      stats.errors++;
      return sendError(res, error);
    }
    if (LOSABLE.has(name) && chance(faults.lostResponseRate)) {
      stats.lostResponses++;
      req.socket.destroy();
      return;
    }
    send(res, 200, JSON.stringify(output));
  };

  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      handle(req, res, Buffer.concat(chunks).toString('utf8')).catch((error: unknown) => {
        sendError(res, sqsError('InternalError', String(error)));
      });
    });
  });
  server.keepAliveTimeout = 60_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', resolve);
  });
  url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;

  return {
    url,
    queueUrl,
    createQueue: (name, attributes) => queueUrl(queues.create(name, attributes).name),
    messages(name) {
      const queue = queues.get(name);
      const now = Date.now();
      queue.expire(now);
      return queue.messages.map((m) => ({
        messageId: m.messageId,
        body: m.body,
        messageAttributes: m.messageAttributes,
        receiveCount: m.receiveCount,
        sentAt: m.sentAt,
        visible: m.visibleAt <= now,
      }));
    },
    get stats() {
      return stats;
    },
    setFaults(next) {
      faults = { ...next };
    },
    reset() {
      for (const queue of queues.byName.values()) queue.wake();
      queues = new Queues();
      stats = emptyStats();
      faults = {};
    },
    close() {
      closed = true;
      for (const queue of queues.byName.values()) queue.wake();
      return new Promise<void>((resolve) => {
        server.close(() => resolve());
        // Let the woken long polls answer before the idle keep-alive sockets are cut.
        setImmediate(() => server.closeAllConnections());
      });
    },
  };
}

/** ChangeMessageVisibility's VisibilityTimeout: required, 0–43,200 s (API reference). */
function requiredVisibility(value: unknown): number {
  if (value === undefined)
    throw sqsError('MissingParameter', 'The request must contain the parameter VisibilityTimeout.');
  return integerIn(value, 'VisibilityTimeout', 0, 43_200, 0);
}

/** A batch entry's size for the batch total; an entry too malformed to size fails on its own later. */
function safeSize(entry: Input): number {
  try {
    return checkMessage(entry.MessageBody, entry.MessageAttributes as Record<string, MessageAttributeValue>);
  } catch {
    return 0;
  }
}

async function delay(faults: SqsFaults, random: () => number): Promise<void> {
  const l = faults.latencyMs;
  const ms = typeof l === 'number' ? l : Array.isArray(l) ? l[0] + random() * (l[1] - l[0]) : 0;
  if (ms > 0) await new Promise((r) => setTimeout(r, ms));
}
