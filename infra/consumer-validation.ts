/**
 * The `OutboxConsumer`'s props checked at synth, before anything is created: each wrong prop is an
 * `OutboxConfigError` naming it; and the queue topology's visibility timeout, which follows from
 * them.
 */
import { Duration } from 'aws-cdk-lib';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import { OutboxConfigError } from '../shared/platform/errors.ts';
import { DEFAULT_ROLES } from '../shared/platform/names.ts';
import {
  CUSTOM_BUS_FILTER_PATTERN_MAX_LENGTH,
  CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS,
  INBOX_MAX_EVENT_AGE_SECONDS,
  MAX_QUEUE_VISIBILITY_SECONDS,
  type OutboxConsumerProps,
  RETRY_WINDOW_SECONDS_BY_ATTEMPTS,
} from './consumer-props.ts';
import { subscriberFilterPattern } from './consumer-subscriber.ts';

/**
 * Checks the props before anything is created.
 * @returns the rule's distinct sources and types, in the order given
 * @throws {OutboxConfigError} whose `variable` names the prop, e.g. `events[1].source`
 */
export function validateConsumerProps(props: OutboxConsumerProps): { sources: string[]; types: string[] } {
  const fail = (field: string, message: string): never => {
    throw new OutboxConfigError(field, `OutboxConsumer ${JSON.stringify(props.consumer ?? '')}: ${message}`);
  };
  const role = `${DEFAULT_ROLES.consumer}_${props.consumer}`;
  if (
    typeof props.consumer !== 'string' ||
    props.consumer.trim() === '' ||
    props.consumer.includes(',') ||
    Buffer.byteLength(role) > 63
  ) {
    fail(
      'consumer',
      `expected a non-empty name without a comma whose role (${role}) is at most 63 bytes (Postgres's limit)`,
    );
  }
  if (!Array.isArray(props.events) || props.events.length === 0) {
    fail('events', 'expected at least one event definition (from defineEvent) to subscribe to');
  }
  props.events.forEach((event, i) => {
    if (typeof event?.type !== 'string' || event.type.trim() === '' || event.type.length > 128) {
      fail(`events[${i}].type`, 'expected a DetailType: a non-empty string of at most 128 characters');
    }
    if (typeof event.source !== 'string' || event.source.trim() === '') {
      fail(
        `events[${i}].source`,
        `event ${event.type} has no source: give defineEvent a source, since the rule matches on it`,
      );
    }
  });
  if ((props.entry === undefined) === (props.existingFunction === undefined)) {
    fail('entry', 'expected exactly one of entry (a handler file to bundle) and existingFunction');
  }
  if (props.functionProps && !props.entry) fail('functionProps', 'applies only with entry');
  const lagSeconds = props.consumerLagAlarmSeconds;
  if (
    lagSeconds !== undefined &&
    !(typeof lagSeconds === 'number' && Number.isFinite(lagSeconds) && lagSeconds > 0)
  ) {
    fail('consumerLagAlarmSeconds', `expected a positive number of seconds, got ${String(lagSeconds)}`);
  }
  if ((props.eventBus === undefined) === (props.customEventBusArn === undefined)) {
    fail(
      'eventBus',
      'expected exactly one of eventBus (a classic bus: relay.eventBus) and customEventBusArn (a Custom Event Bus: relay.customEventBusArn)',
    );
  }
  if (props.customEventBusArn !== undefined) validateCustomBusConsumer(props, fail);
  const topology = props.topology ?? 'direct';
  if (topology !== 'direct' && topology !== 'queue')
    fail('topology', `expected direct or queue, got ${topology}`);
  const onlyFor = (field: keyof OutboxConsumerProps, only: 'direct' | 'queue') => {
    if (props[field] !== undefined && topology !== only) fail(field, `applies only to the ${only} topology`);
  };
  for (const field of ['retryAttempts', 'maxEventAge'] as const) onlyFor(field, 'direct');
  for (const field of ['visibilityTimeout', 'maxReceiveCount', 'batchSize', 'maxConcurrency'] as const)
    onlyFor(field, 'queue');
  const whole = (field: keyof OutboxConsumerProps, value: unknown, min: number, max: number) => {
    if (
      value !== undefined &&
      (!Number.isInteger(value) || (value as number) < min || (value as number) > max)
    ) {
      fail(field, `expected a whole number from ${min} to ${max}, got ${String(value)}`);
    }
  };
  whole('maxReceiveCount', props.maxReceiveCount, 1, 50);
  whole('batchSize', props.batchSize, 1, 10);
  whole('maxConcurrency', props.maxConcurrency, 2, 1000);
  if (topology === 'queue') queueVisibilityTimeout(props);
  const retryAttempts = props.retryAttempts ?? 2;
  if (![0, 1, 2].includes(retryAttempts)) fail('retryAttempts', `expected 0, 1 or 2, got ${retryAttempts}`);
  const window = RETRY_WINDOW_SECONDS_BY_ATTEMPTS[retryAttempts];
  const age = (props.maxEventAge ?? Duration.hours(6)).toSeconds();
  if (age < 60 || age > 21_600 || age < window) {
    fail('maxEventAge', `expected 60 s to 6 h and at least the retry window (${window} s), got ${age} s`);
  }
  const deliveryRetries = props.deliveryRetryAttempts ?? 185;
  if (!Number.isInteger(deliveryRetries) || deliveryRetries < 0 || deliveryRetries > 185) {
    fail('deliveryRetryAttempts', `expected a whole number from 0 to 185, got ${deliveryRetries}`);
  }
  const deliveryAge = (props.deliveryMaxEventAge ?? Duration.hours(24)).toSeconds();
  if (deliveryAge < 60 || deliveryAge > 86_400) {
    fail('deliveryMaxEventAge', `expected 60 s to 24 h, got ${deliveryAge} s`);
  }
  const distinct = (values: string[]) => [...new Set(values)];
  return {
    sources: distinct(props.events.map((e) => e.source as string)),
    types: distinct(props.events.map((e) => e.type)),
  };
}

/**
 * The combinations a Custom Event Bus subscriber refuses.
 * - `retryAttempts`, `maxEventAge`, `existingFailedEventsQueue`: Lambda's asynchronous retries and
 *   on-failure destination, which neither topology uses here: the direct one invokes synchronously
 *   and the subscriber retries (`deliveryRetryAttempts`, `deliveryMaxEventAge`); the queue one
 *   reads an SQS FIFO queue, which redrives to a FIFO failed-events queue of its own.
 * - direct topology, a function timeout over {@link CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS}: the
 *   subscriber would give up on a slow invocation and send the event again while it still runs.
 *   (The queue topology's subscriber sends to the queue, and the function's timeout is the queue's
 *   business: its visibility timeout.)
 * - `deliveryMaxEventAge` over 6 h: it is the inbox's `maxEventAgeSeconds`, at most 21,600.
 * - `events` whose filter pattern is over {@link CUSTOM_BUS_FILTER_PATTERN_MAX_LENGTH} characters.
 */
function validateCustomBusConsumer(
  props: OutboxConsumerProps,
  fail: (field: string, message: string) => never,
): void {
  for (const field of ['retryAttempts', 'maxEventAge', 'existingFailedEventsQueue'] as const) {
    if (props[field] !== undefined) {
      fail(
        field,
        'does not apply on a Custom Event Bus: the subscriber invokes the function synchronously and retries it itself (deliveryRetryAttempts, deliveryMaxEventAge), then records the event in deadLetterQueue',
      );
    }
  }
  const timeout = props.entry
    ? (props.functionProps?.timeout ?? Duration.seconds(30)).toSeconds()
    : props.existingFunction instanceof lambda.Function
      ? (props.existingFunction.timeout ?? Duration.seconds(3)).toSeconds()
      : undefined;
  const direct = (props.topology ?? 'direct') === 'direct';
  if (direct && timeout !== undefined && timeout > CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS) {
    fail(
      props.entry ? 'functionProps.timeout' : 'existingFunction',
      `the function's timeout is ${timeout} s: a Custom Event Bus subscriber waits at most ${CUSTOM_BUS_INVOCATION_TIMEOUT_SECONDS} s for an invocation and would send the event again while it still runs`,
    );
  }
  const distinct = (values: string[]) => [...new Set(values)];
  const pattern = subscriberFilterPattern(
    distinct(props.events.map((e) => e.source as string)),
    distinct(props.events.map((e) => e.type)),
  );
  if (pattern.length > CUSTOM_BUS_FILTER_PATTERN_MAX_LENGTH) {
    fail(
      'events',
      `the subscriber's filter pattern for these ${props.events.length} events is ${pattern.length} characters, over the ${CUSTOM_BUS_FILTER_PATTERN_MAX_LENGTH} a Custom Event Bus filter takes: split the events over several consumers`,
    );
  }
  const age = props.deliveryMaxEventAge?.toSeconds();
  if (age !== undefined && age > INBOX_MAX_EVENT_AGE_SECONDS) {
    fail(
      'deliveryMaxEventAge',
      `on a Custom Event Bus it is the inbox's maxEventAgeSeconds, at most ${INBOX_MAX_EVENT_AGE_SECONDS} s; got ${age} s`,
    );
  }
}

/**
 * The queue topology's visibility timeout: the given one, or six times the function's timeout
 * capped at {@link MAX_QUEUE_VISIBILITY_SECONDS}. The event source mapping needs at least the
 * function's timeout, or a message would be received again while its first invocation still runs.
 * @throws {OutboxConfigError} (`visibilityTimeout`) when it is under the function's timeout or over the cap,
 *   or (`existingFunction`) when a function not made by CDK leaves it unknown and none was given
 */
export function queueVisibilityTimeout(props: OutboxConsumerProps): Duration {
  const fail = (field: string, message: string): never => {
    throw new OutboxConfigError(field, `OutboxConsumer ${JSON.stringify(props.consumer)}: ${message}`);
  };
  const functionTimeout = props.entry
    ? (props.functionProps?.timeout ?? Duration.seconds(30)).toSeconds()
    : props.existingFunction instanceof lambda.Function
      ? (props.existingFunction.timeout ?? Duration.seconds(3)).toSeconds()
      : undefined;
  if (props.visibilityTimeout === undefined && functionTimeout === undefined) {
    fail('existingFunction', "the function's timeout is unknown: give visibilityTimeout");
  }
  const seconds =
    props.visibilityTimeout?.toSeconds() ??
    Math.min(6 * (functionTimeout as number), MAX_QUEUE_VISIBILITY_SECONDS);
  if (
    seconds > MAX_QUEUE_VISIBILITY_SECONDS ||
    (functionTimeout !== undefined && seconds < functionTimeout)
  ) {
    fail(
      'visibilityTimeout',
      `${seconds} s: expected at least the function's timeout (${functionTimeout ?? '?'} s) and at most ${MAX_QUEUE_VISIBILITY_SECONDS} s (a retry must come before the monitor counts the event as failed)`,
    );
  }
  return Duration.seconds(seconds);
}
