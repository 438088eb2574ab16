/**
 * Event validation, run by `enqueue` before anything is written (docs/guarantees.md#what-is-promised: "Bad input"): an event the bus
 * or Postgres would refuse is rejected here with an error naming the field, instead of being
 * committed and then stuck in the outbox forever.
 */
// Each platform module by its own path, never platform/index.ts: that front door also loads the
// connection (AWS SDK's RDS signer) and migration (node-pg-migrate) modules, which a producer-only
// service does not install (the producer package, shared/producer).
import {
  DEFAULT_MAX_REQUEST_BYTES,
  detailJson,
  entrySize,
  MAX_DETAIL_TYPE_LENGTH,
} from '../platform/envelope.ts';
import { OutboxValidationError } from '../platform/errors.ts';
import { JsonNumberText, outsideInt64, parseJsonNumbersAsText } from '../platform/exact-json.ts';
import type { EnqueueOptions, OutboxEvent } from './types.ts';

/** A validated event, normalised for insertion. */
export interface ValidEvent {
  type: string;
  source: string;
  aggregateType: string;
  aggregateId: string;
  /** The payload as JSON text. */
  payloadJson: string;
  traceHeader: string | null;
  idempotencyKey: string | null;
}

/**
 * The fields of an {@link OutboxEvent}, in the order the docs list them. Any other own property is
 * refused: a misspelt optional field (`idempotency_key`) would otherwise be ignored silently.
 */
export const OUTBOX_EVENT_FIELDS: readonly (keyof OutboxEvent)[] = [
  'type',
  'aggregateType',
  'aggregateId',
  'payload',
  'source',
  'idempotencyKey',
  'traceHeader',
];
const KNOWN_FIELDS: ReadonlySet<string> = new Set(OUTBOX_EVENT_FIELDS);
/** `idempotency_key`, `IdempotencyKey`, `idempotency-key` → `idempotencykey`, to suggest the field meant. */
const FIELD_BY_LOOSE_NAME = new Map(OUTBOX_EVENT_FIELDS.map((f) => [looseName(f), f]));

function looseName(key: string): string {
  return key.replace(/[-_\s]/g, '').toLowerCase();
}

/**
 * Refuses an event object with a property that is not one of {@link OUTBOX_EVENT_FIELDS}, naming
 * it, listing the known fields, and suggesting the one meant for a snake_case or case variant.
 * Known fields set to `undefined` are fine.
 * @throws {OutboxValidationError} with `field` the unknown property's name
 */
export function checkKnownFields(event: object, index?: number): void {
  for (const key of Object.keys(event)) {
    if (KNOWN_FIELDS.has(key)) continue;
    const meant = FIELD_BY_LOOSE_NAME.get(looseName(key));
    throw new OutboxValidationError(
      key,
      `is not a known field (expected one of ${OUTBOX_EVENT_FIELDS.join(', ')})` +
        (meant === undefined ? '' : `; did you mean ${meant}?`),
      { index },
    );
  }
}

const MAX_KEY_LENGTH = 512;
const MAX_AGGREGATE_LENGTH = 512;
const MAX_TRACE_HEADER_LENGTH = 500;
/**
 * Worst case of the metadata the relay adds to Detail: the largest int8 as the sequence (19
 * digits), a full ISO timestamp. outbox_enqueue measures with the same placeholder (migration 009).
 */
const PLACEHOLDER_SEQUENCE = '9223372036854775807';

/**
 * Checks one event and returns it normalised.
 * @param index position in an `enqueueMany` call, used in the error's field path
 * @throws {OutboxValidationError} naming the first bad field; a property that is not a field of
 *   {@link OutboxEvent} (e.g. `idempotency_key`) is refused by name, with the field probably meant
 */
export function validateEvent(event: OutboxEvent, options: EnqueueOptions, index?: number): ValidEvent {
  const fail = (field: string, message: string, cause?: unknown): never => {
    throw new OutboxValidationError(field, message, { index, cause });
  };
  if (event === null || typeof event !== 'object') fail('event', 'must be an object');
  checkKnownFields(event, index);

  const type = requireText(event.type, 'type', MAX_DETAIL_TYPE_LENGTH, fail);
  const source = requireText(event.source ?? options.defaultSource, 'source', 256, fail);
  if (source.toLowerCase().startsWith('aws.'))
    fail('source', 'must not start with "aws." (reserved for AWS services)');
  const aggregateType = requireText(event.aggregateType, 'aggregateType', MAX_AGGREGATE_LENGTH, fail);
  const aggregateId = requireText(
    typeof event.aggregateId === 'number' && Number.isSafeInteger(event.aggregateId)
      ? String(event.aggregateId)
      : event.aggregateId,
    'aggregateId',
    MAX_AGGREGATE_LENGTH,
    fail,
    'must be a string or a safe integer',
  );
  const idempotencyKey =
    event.idempotencyKey === undefined || event.idempotencyKey === null
      ? null
      : requireText(event.idempotencyKey, 'idempotencyKey', MAX_KEY_LENGTH, fail);
  const traceHeader =
    event.traceHeader === undefined || event.traceHeader === null
      ? null
      : requireText(event.traceHeader, 'traceHeader', MAX_TRACE_HEADER_LENGTH, fail);

  const payload = event.payload;
  if (!isPlainObject(payload)) {
    fail('payload', 'must be a plain JSON object (EventBridge requires Detail to be an object)');
  }
  // First what JSON.stringify would drop or change silently (functions, Maps, NaN…), then the
  // JSON text itself — after any toJSON() ran — for what jsonb or EventBridge would refuse.
  checkJsonValue(payload, 'payload', 0, fail);
  let payloadJson = '';
  try {
    payloadJson = JSON.stringify(payload);
  } catch (cause) {
    fail('payload', `cannot be serialised as JSON: ${(cause as Error).message}`, cause);
  }
  // Numbers as their exact text: a JSON.rawJSON value (or a toJSON() result) may hold digits a
  // double would round, and the int64 check must see the number the database will store.
  const serialised: unknown = parseJsonNumbersAsText(payloadJson);
  if (!isPlainObject(serialised))
    fail('payload', 'must serialise to a JSON object (a toJSON() returned something else)');
  checkSerialised(serialised, 'payload', 0, fail);

  const maxEntryBytes = options.maxEntryBytes ?? DEFAULT_MAX_REQUEST_BYTES;
  if (!Number.isInteger(maxEntryBytes) || maxEntryBytes < 1 || maxEntryBytes > DEFAULT_MAX_REQUEST_BYTES) {
    fail(
      'maxEntryBytes',
      `must be a whole number of bytes from 1 to ${DEFAULT_MAX_REQUEST_BYTES} (the largest entry EventBridge accepts); got ${maxEntryBytes}`,
    );
  }
  // A lower bound of what the relay will send: Postgres spells some numbers longer than
  // JSON.stringify does (1e-7 as 0.0000001), and the relay sends Postgres's spelling. The database
  // function measures that spelling exactly (outbox_json_bytes) and refuses the event if it is over.
  const size = entrySize({
    Source: source,
    DetailType: type,
    Time: new Date(),
    Detail: detailJson(
      {
        eventId: '00000000-0000-0000-0000-000000000000',
        aggregateType,
        aggregateId,
        sequence: PLACEHOLDER_SEQUENCE,
        typeSequence: PLACEHOLDER_SEQUENCE,
        occurredAt: '2000-01-01T00:00:00.000Z',
      },
      payloadJson,
    ),
  });
  if (size > maxEntryBytes) {
    fail('payload', `makes the EventBridge entry ${size} bytes, over the ${maxEntryBytes}-byte limit`);
  }
  return { type, source, aggregateType, aggregateId, payloadJson, traceHeader, idempotencyKey };
}

function requireText(
  value: unknown,
  field: string,
  maxLength: number,
  fail: (field: string, message: string) => never,
  /** What to say when the value is there but not a string; the field may accept more than strings. */
  notAString = 'must be a string',
): string {
  if (typeof value !== 'string') return fail(field, value === undefined ? 'is required' : notAString);
  if (value.trim() === '') return fail(field, 'must not be empty');
  if (value.length > maxLength)
    return fail(field, `must be at most ${maxLength} characters (got ${value.length})`);
  checkString(value, field, fail);
  return value;
}

/** jsonb rejects U+0000 and unpaired UTF-16 surrogates; so does any UTF-8 consumer downstream. */
function checkString(value: string, field: string, fail: (field: string, message: string) => never): void {
  if (value.includes('\u0000'))
    fail(field, 'contains the NUL character \\u0000, which Postgres jsonb rejects');
  if (!value.isWellFormed()) fail(field, 'contains a lone UTF-16 surrogate, which is not valid Unicode');
}

/** EventBridge processes JSON nested up to 1100 levels; the envelope adds two. */
const MAX_DEPTH = 1_000;

const isRawJson = (JSON as unknown as { isRawJSON(value: unknown): boolean }).isRawJSON;

function isPlainObject(value: unknown): value is Record<string, unknown> {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const proto = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function childPath(path: string, key: string): string {
  return /^[A-Za-z_$][\w$]*$/.test(key) ? `${path}.${key}` : `${path}[${JSON.stringify(key)}]`;
}

/** Walks a payload and rejects what JSON.stringify would drop or change silently, naming the path. */
function checkJsonValue(
  value: unknown,
  path: string,
  depth: number,
  fail: (field: string, message: string) => never,
): void {
  if (depth > MAX_DEPTH) fail(path, `nests deeper than ${MAX_DEPTH} levels`);
  switch (typeof value) {
    case 'number':
      if (!Number.isFinite(value)) fail(path, `must be a finite number (got ${value})`);
      return;
    case 'bigint':
      fail(path, 'is a BigInt, which JSON cannot represent; send it as a string');
      return;
    case 'undefined':
    case 'function':
    case 'symbol':
      fail(path, `is a ${typeof value}, which JSON cannot represent`);
      return;
    case 'object': {
      if (value === null) return;
      // JSON.rawJSON('1234567890123456789'): a number written out digit for digit (checked after
      // serialisation), the way to enqueue one a double cannot hold from TypeScript.
      if (isRawJson(value)) return;
      if (typeof (value as { toJSON?: unknown }).toJSON === 'function') return; // checked after serialisation
      if (value instanceof Map || value instanceof Set)
        fail(path, `is a ${value.constructor.name}, which JSON serialises as {}`);
      if (Array.isArray(value)) {
        value.forEach((item, i) => {
          checkJsonValue(item, `${path}[${i}]`, depth + 1, fail);
        });
        return;
      }
      for (const [key, item] of Object.entries(value)) {
        if (item === undefined) continue; // dropped by JSON.stringify, as for an absent optional field
        checkJsonValue(item, childPath(path, key), depth + 1, fail);
      }
    }
  }
}

/** Walks the serialised payload for what Postgres jsonb or EventBridge would refuse, naming the path. */
function checkSerialised(
  value: unknown,
  path: string,
  depth: number,
  fail: (field: string, message: string) => never,
): void {
  if (depth > MAX_DEPTH) fail(path, `nests deeper than ${MAX_DEPTH} levels`);
  if (typeof value === 'string') {
    checkString(value, path, fail);
  } else if (value instanceof JsonNumberText) {
    if (outsideInt64(value.text)) {
      fail(
        path,
        `is a number outside the int64 range EventBridge accepts (got ${value.text}); send it as a string`,
      );
    }
  } else if (Array.isArray(value)) {
    value.forEach((item, i) => {
      checkSerialised(item, `${path}[${i}]`, depth + 1, fail);
    });
  } else if (value !== null && typeof value === 'object') {
    for (const [key, item] of Object.entries(value)) {
      const child = childPath(path, key);
      checkString(key, child, fail);
      checkSerialised(item, child, depth + 1, fail);
    }
  }
}
