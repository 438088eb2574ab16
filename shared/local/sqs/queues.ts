/**
 * The queue model of the local SQS endpoint: standard queues only (no FIFO, no
 * deduplication, no message groups), held in memory, with SQS's visibility timeout, delay,
 * retention and dead-letter redrive. Times are read from `Date.now()` when a queue is touched, so
 * an expired visibility timeout, delay or retention period takes effect on the next request.
 *
 * Not modelled: a standard queue's duplicate deliveries and sampling of servers (a receive returns
 * the visible messages in the order they were sent, up to the number asked for), the 12-hour cap
 * on a message's total visibility, FIFO queues, KMS encryption, policies, tags, DeleteQueue.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import {
  invalidParameter,
  type MessageAttributeValue,
  md5OfBody,
  md5OfMessageAttributes,
  sqsError,
} from './protocol.ts';

export const REGION = 'us-east-1';
export const ACCOUNT = '123456789012';
/** The SenderId SQS reports for the local endpoint's (single) caller. */
export const SENDER_ID = 'AIDAIEXAMPLELOCALSQS';

/** A queue's settings; numbers in seconds or bytes as the SQS attribute of the same name. */
export interface QueueSettings {
  VisibilityTimeout: number;
  MessageRetentionPeriod: number;
  MaximumMessageSize: number;
  DelaySeconds: number;
  ReceiveMessageWaitTimeSeconds: number;
  /** The RedrivePolicy JSON as given, undefined for none. */
  RedrivePolicy?: string;
}

// Ranges and defaults from the CreateQueue API reference (Attributes), checked with
// @aws-sdk/client-sqs 3.1175's documentation: MaximumMessageSize 1,024–1,048,576 bytes, default
// 1 MiB (raised from 256 KiB in 2025); retention 60 s–14 days, default 4 days.
const RANGES: Record<keyof Omit<QueueSettings, 'RedrivePolicy'>, [number, number, number]> = {
  VisibilityTimeout: [0, 43_200, 30],
  MessageRetentionPeriod: [60, 1_209_600, 345_600],
  MaximumMessageSize: [1_024, 1_048_576, 1_048_576],
  DelaySeconds: [0, 900, 0],
  ReceiveMessageWaitTimeSeconds: [0, 20, 0],
};
/** Attributes SQS accepts that this endpoint stores and returns but does not act on. */
const INERT = [
  'Policy',
  'KmsMasterKeyId',
  'KmsDataKeyReusePeriodSeconds',
  'SqsManagedSseEnabled',
  'RedriveAllowPolicy',
];

/** A message in a queue. Times are ms since the epoch. */
export interface StoredMessage {
  messageId: string;
  body: string;
  messageAttributes: Record<string, MessageAttributeValue>;
  traceHeader?: string;
  sentAt: number;
  /** Before this the message is delayed (never received) or in flight (received). */
  visibleAt: number;
  receiveCount: number;
  firstReceivedAt?: number;
  /** The receipt handle of the latest receive; only it deletes the message. */
  receiptHandle?: string;
}

export class Queue {
  readonly arn: string;
  readonly messages: StoredMessage[] = [];
  readonly createdAt = Math.floor(Date.now() / 1000);
  lastModifiedAt = this.createdAt;
  lastPurgeAt = 0;
  /** Wakes long polls waiting on this queue. */
  readonly waiters = new Set<() => void>();

  readonly name: string;
  settings: QueueSettings;
  inert: Record<string, string>;

  constructor(name: string, settings: QueueSettings, inert: Record<string, string>) {
    this.name = name;
    this.settings = settings;
    this.inert = inert;
    this.arn = `arn:aws:sqs:${REGION}:${ACCOUNT}:${name}`;
  }

  get redrive(): { deadLetterTargetArn: string; maxReceiveCount: number } | undefined {
    return this.settings.RedrivePolicy === undefined ? undefined : JSON.parse(this.settings.RedrivePolicy);
  }

  /** Drops messages older than the retention period (counted from the original send, as SQS does). */
  expire(now: number): void {
    const limit = now - this.settings.MessageRetentionPeriod * 1000;
    for (let i = this.messages.length - 1; i >= 0; i--) {
      if ((this.messages[i] as StoredMessage).sentAt <= limit) this.messages.splice(i, 1);
    }
  }

  wake(): void {
    for (const w of this.waiters) w();
  }

  /** The queue's attributes as GetQueueAttributes answers them (strings). */
  attributes(now: number): Record<string, string> {
    this.expire(now);
    const waiting = this.messages.filter((m) => m.visibleAt > now);
    const out: Record<string, string> = {
      QueueArn: this.arn,
      ApproximateNumberOfMessages: String(this.messages.length - waiting.length),
      ApproximateNumberOfMessagesNotVisible: String(waiting.filter((m) => m.receiveCount > 0).length),
      ApproximateNumberOfMessagesDelayed: String(waiting.filter((m) => m.receiveCount === 0).length),
      CreatedTimestamp: String(this.createdAt),
      LastModifiedTimestamp: String(this.lastModifiedAt),
      VisibilityTimeout: String(this.settings.VisibilityTimeout),
      MessageRetentionPeriod: String(this.settings.MessageRetentionPeriod),
      MaximumMessageSize: String(this.settings.MaximumMessageSize),
      DelaySeconds: String(this.settings.DelaySeconds),
      ReceiveMessageWaitTimeSeconds: String(this.settings.ReceiveMessageWaitTimeSeconds),
      ...this.inert,
    };
    if (this.settings.RedrivePolicy !== undefined) out.RedrivePolicy = this.settings.RedrivePolicy;
    return out;
  }
}

/** Every queue of the endpoint, by name, with the receipt handles it issued. */
export class Queues {
  readonly byName = new Map<string, Queue>();
  /** Receipt handle → the queue and message it was issued for (kept after a delete, see below). */
  readonly handles = new Map<string, { queue: string; messageId: string }>();

  get(name: string): Queue {
    const queue = this.byName.get(name);
    if (!queue) throw sqsError('QueueDoesNotExist', 'The specified queue does not exist.');
    return queue;
  }

  byArn(arn: string): Queue | undefined {
    const name = arn.split(':')[5];
    const queue = name === undefined ? undefined : this.byName.get(name);
    return queue?.arn === arn ? queue : undefined;
  }

  /**
   * Validates CreateQueue/SetQueueAttributes attributes over `base` and returns the result.
   * InvalidAttributeName for an unknown one (FifoQueue included: standard queues only),
   * InvalidAttributeValue for a value out of range, InvalidParameterValue for a RedrivePolicy
   * whose dead-letter queue does not exist or whose maxReceiveCount is outside 1–1,000.
   */
  settingsFrom(
    attributes: Record<string, string> | undefined,
    base: QueueSettings,
    inert: Record<string, string>,
  ): [QueueSettings, Record<string, string>] {
    const settings = { ...base };
    const inertOut = { ...inert };
    for (const [name, value] of Object.entries(attributes ?? {})) {
      if (name in RANGES) {
        const [min, max] = RANGES[name as keyof typeof RANGES];
        const n = Number(value);
        if (!/^\d+$/.test(String(value)) || n < min || n > max) {
          throw sqsError(
            'InvalidAttributeValue',
            `Invalid value for the parameter ${name}. Reason: must be between ${min} and ${max}.`,
          );
        }
        settings[name as keyof typeof RANGES] = n;
      } else if (name === 'RedrivePolicy') {
        settings.RedrivePolicy = value === '' ? undefined : this.checkRedrive(value);
      } else if (INERT.includes(name)) {
        inertOut[name] = String(value);
      } else {
        throw sqsError('InvalidAttributeName', `Unknown Attribute ${name}.`);
      }
    }
    return [settings, inertOut];
  }

  private checkRedrive(value: string): string {
    let policy: { deadLetterTargetArn?: unknown; maxReceiveCount?: unknown };
    try {
      policy = JSON.parse(value);
    } catch {
      throw invalidParameter(
        `Value ${value} for parameter RedrivePolicy is invalid. Reason: Invalid value for RedrivePolicy.`,
      );
    }
    const count = Number(policy.maxReceiveCount);
    if (!Number.isInteger(count) || count < 1 || count > 1000) {
      throw invalidParameter(
        `Value ${value} for parameter RedrivePolicy is invalid. Reason: Invalid value for maxReceiveCount: ${String(policy.maxReceiveCount)}, valid values are from 1 to 1000 both inclusive.`,
      );
    }
    if (typeof policy.deadLetterTargetArn !== 'string' || !this.byArn(policy.deadLetterTargetArn)) {
      throw invalidParameter(
        `Value ${value} for parameter RedrivePolicy is invalid. Reason: Dead letter target does not exist.`,
      );
    }
    return JSON.stringify({ deadLetterTargetArn: policy.deadLetterTargetArn, maxReceiveCount: count });
  }

  /**
   * CreateQueue: a new queue, or the existing one when every attribute (defaults for those not
   * given) equals the existing queue's, else QueueNameExists (CreateQueue API reference).
   * Names: 1–80 of A-Z a-z 0-9 - _; a `.fifo` name is refused (standard queues only).
   */
  create(name: unknown, attributes?: Record<string, string>): Queue {
    if (typeof name !== 'string' || !/^[A-Za-z0-9_-]{1,80}$/.test(name)) {
      throw invalidParameter(
        'Can only include alphanumeric characters, hyphens, or underscores. 1 to 80 in length',
      );
    }
    const defaults = Object.fromEntries(
      Object.entries(RANGES).map(([k, [, , d]]) => [k, d]),
    ) as unknown as QueueSettings;
    const [settings, inert] = this.settingsFrom(attributes, defaults, {});
    const existing = this.byName.get(name);
    if (existing) {
      const same = JSON.stringify([existing.settings, existing.inert]) === JSON.stringify([settings, inert]);
      if (!same)
        throw sqsError(
          'QueueNameExists',
          'A queue already exists with the same name and a different value for attribute(s)',
        );
      return existing;
    }
    const queue = new Queue(name, settings, inert);
    this.byName.set(name, queue);
    return queue;
  }

  /** SendMessage into `queue`, checked already; `delaySeconds` undefined takes the queue's. */
  send(
    queue: Queue,
    body: string,
    messageAttributes: Record<string, MessageAttributeValue>,
    delaySeconds: number | undefined,
    traceHeader?: string,
  ) {
    const now = Date.now();
    const message: StoredMessage = {
      messageId: randomUUID(),
      body,
      messageAttributes,
      traceHeader,
      sentAt: now,
      visibleAt: now + (delaySeconds ?? queue.settings.DelaySeconds) * 1000,
      receiveCount: 0,
    };
    queue.messages.push(message);
    queue.wake();
    return {
      MessageId: message.messageId,
      MD5OfMessageBody: md5OfBody(body),
      MD5OfMessageAttributes: md5OfMessageAttributes(messageAttributes),
    };
  }

  /**
   * Takes up to `max` visible messages and makes them invisible for `visibilitySeconds`, each with
   * a new receipt handle. A message whose receive count has reached the queue's maxReceiveCount is
   * moved to the dead-letter queue instead (SQS moves it when a receive would exceed the count),
   * keeping its id, body, attributes, receive count and original SentTimestamp (standard queues keep
   * the enqueue time, so retention in the DLQ counts from the first send).
   */
  receive(queue: Queue, max: number, visibilitySeconds: number): StoredMessage[] {
    const now = Date.now();
    queue.expire(now);
    const redrive = queue.redrive;
    const dlq = redrive ? this.byArn(redrive.deadLetterTargetArn) : undefined;
    const taken: StoredMessage[] = [];
    for (let i = 0; i < queue.messages.length && taken.length < max; i++) {
      const message = queue.messages[i] as StoredMessage;
      if (message.visibleAt > now) continue;
      if (redrive && dlq && message.receiveCount >= redrive.maxReceiveCount) {
        queue.messages.splice(i--, 1);
        message.visibleAt = now;
        message.receiptHandle = undefined;
        dlq.messages.push(message);
        dlq.wake();
        continue;
      }
      message.receiveCount++;
      message.firstReceivedAt ??= now;
      message.visibleAt = now + visibilitySeconds * 1000;
      // Opaque, unguessable and new on every receive, as SQS's handles are.
      message.receiptHandle = randomBytes(48).toString('base64');
      this.handles.set(message.receiptHandle, { queue: queue.name, messageId: message.messageId });
      taken.push(message);
    }
    return taken;
  }

  /**
   * Finds the message a receipt handle names. ReceiptHandleIsInvalid for a handle this endpoint
   * never issued (or issued for another queue). Returns undefined when the handle is not the
   * message's latest or the message is gone: SQS's DeleteMessage docs say to use the most recent
   * handle and that a delete with an older one succeeds without deleting.
   */
  private find(queue: Queue, handle: unknown): StoredMessage | undefined {
    const issued = typeof handle === 'string' ? this.handles.get(handle) : undefined;
    if (!issued || issued.queue !== queue.name) {
      throw sqsError(
        'ReceiptHandleIsInvalid',
        `The input receipt handle "${String(handle)}" is not a valid receipt handle.`,
      );
    }
    const message = queue.messages.find((m) => m.messageId === issued.messageId);
    return message?.receiptHandle === handle ? message : undefined;
  }

  /** DeleteMessage: deletes the message when `handle` is its latest, succeeds doing nothing otherwise. */
  delete(queue: Queue, handle: unknown): void {
    const message = this.find(queue, handle);
    if (message) queue.messages.splice(queue.messages.indexOf(message), 1);
  }

  /**
   * ChangeMessageVisibility: the message becomes visible `seconds` from now (0: at once).
   * MessageNotInflight when its visibility timeout has already run out or `handle` is stale.
   */
  changeVisibility(queue: Queue, handle: unknown, seconds: number): void {
    const message = this.find(queue, handle);
    const now = Date.now();
    if (!message || message.visibleAt <= now)
      throw sqsError('MessageNotInflight', 'The message referred to is not in flight.');
    message.visibleAt = now + seconds * 1000;
    if (seconds === 0) queue.wake();
  }
}

const SYSTEM_ATTRIBUTES = [
  'SenderId',
  'SentTimestamp',
  'ApproximateReceiveCount',
  'ApproximateFirstReceiveTimestamp',
  'AWSTraceHeader',
];

/**
 * A received message as ReceiveMessage answers it: the system attributes named in
 * `systemNames` (All, SenderId, SentTimestamp, ApproximateReceiveCount,
 * ApproximateFirstReceiveTimestamp, AWSTraceHeader; timestamps in ms since the epoch) and the
 * message attributes matching `attributeNames` (All, `.*`, a `prefix.*` or an exact name).
 */
export function receivedMessage(m: StoredMessage, systemNames: string[], attributeNames: string[]) {
  const wanted = (name: string, names: string[]) =>
    names.some(
      (n) => n === 'All' || n === '.*' || n === name || (n.endsWith('.*') && name.startsWith(n.slice(0, -1))),
    );
  const system: Record<string, string | undefined> = {
    SenderId: SENDER_ID,
    SentTimestamp: String(m.sentAt),
    ApproximateReceiveCount: String(m.receiveCount),
    ApproximateFirstReceiveTimestamp: String(m.firstReceivedAt),
    AWSTraceHeader: m.traceHeader,
  };
  const Attributes = Object.fromEntries(
    SYSTEM_ATTRIBUTES.filter((n) => wanted(n, systemNames) && system[n] !== undefined).map((n) => [
      n,
      system[n],
    ]),
  );
  const MessageAttributes = Object.fromEntries(
    Object.entries(m.messageAttributes).filter(([n]) => wanted(n, attributeNames)),
  );
  // SQS digests the attributes it returns, so a filtered receive still verifies.
  const md5 = md5OfMessageAttributes(MessageAttributes);
  return {
    MessageId: m.messageId,
    ReceiptHandle: m.receiptHandle,
    MD5OfBody: md5OfBody(m.body),
    Body: m.body,
    ...(Object.keys(Attributes).length > 0 ? { Attributes } : {}),
    ...(md5 ? { MD5OfMessageAttributes: md5, MessageAttributes } : {}),
  };
}
