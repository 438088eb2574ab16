/**
 * The wire half of the local SQS endpoint: SQS's errors as its AWS JSON 1.0 protocol answers them,
 * the MD5 digests the SDK checks, and the checks of a message's contents and size.
 *
 * Error shape (SQS Developer Guide, "Interpreting Amazon SQS JSON API responses"): an HTTP status,
 * the header `x-amzn-query-error: <legacy query code>;Sender`, and the body
 * `{"__type":"com.amazonaws.sqs#<Name>","message":"…"}`. The SDK is "awsQueryCompatible": it reads
 * the legacy code from the header first and finds the exception class whose `awsQueryError` trait
 * names it, so the code and status of each error below are those of the SQS model in
 * `@aws-sdk/client-sqs` 3.1175 (e.g. QueueDoesNotExist is `AWS.SimpleQueueService.NonExistentQueue`,
 * 400; ReceiptHandleIsInvalid 404; RequestThrottled 403). Errors the model leaves without a legacy
 * code (InvalidAttributeValue, InvalidMessageContents…) use their own name, as do SQS's common errors
 * that have no class (InvalidParameterValue, MissingParameter, InternalError): the SDK raises those
 * as `SQSServiceException` with that `name`.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { ServerResponse } from 'node:http';

/** One of SQS's errors; `type` is the shape name in `__type`, `code` the legacy query code. */
export class SqsError extends Error {
  readonly type: string;
  readonly status: number;
  readonly code: string;
  constructor(type: string, message: string, status = 400, code = type) {
    super(message);
    this.name = type;
    this.type = type;
    this.status = status;
    this.code = code;
  }
}

/** [legacy code, HTTP status] of the errors whose SQS model names them differently or not 400. */
const LEGACY: Record<string, [string, number]> = {
  QueueDoesNotExist: ['AWS.SimpleQueueService.NonExistentQueue', 400],
  QueueNameExists: ['QueueAlreadyExists', 400],
  ReceiptHandleIsInvalid: ['ReceiptHandleIsInvalid', 404],
  RequestThrottled: ['RequestThrottled', 403],
  PurgeQueueInProgress: ['AWS.SimpleQueueService.PurgeQueueInProgress', 403],
  BatchEntryIdsNotDistinct: ['AWS.SimpleQueueService.BatchEntryIdsNotDistinct', 400],
  BatchRequestTooLong: ['AWS.SimpleQueueService.BatchRequestTooLong', 400],
  EmptyBatchRequest: ['AWS.SimpleQueueService.EmptyBatchRequest', 400],
  InvalidBatchEntryId: ['AWS.SimpleQueueService.InvalidBatchEntryId', 400],
  TooManyEntriesInBatchRequest: ['AWS.SimpleQueueService.TooManyEntriesInBatchRequest', 400],
  MessageNotInflight: ['AWS.SimpleQueueService.MessageNotInflight', 400],
  UnsupportedOperation: ['AWS.SimpleQueueService.UnsupportedOperation', 400],
  InternalError: ['InternalError', 500],
};

/** The SQS error `type` with its model's legacy code and status. */
export function sqsError(type: string, message: string): SqsError {
  const [code, status] = LEGACY[type] ?? [type, 400];
  return new SqsError(type, message, status, code);
}

/** SQS's "One or more parameters are invalid" family, the answer to most bad values. */
export function invalidParameter(reason: string): SqsError {
  return sqsError('InvalidParameterValue', reason);
}

/** The status, headers and body SQS answers an error with. */
export function errorResponse(error: SqsError): {
  status: number;
  headers: Record<string, string>;
  body: string;
} {
  // Errors that are the server's fault say `Receiver` in the header, the others `Sender`.
  const fault = error.status >= 500 ? 'Receiver' : 'Sender';
  const type = error.type.includes('#') ? error.type : `com.amazonaws.sqs#${error.type}`;
  return {
    status: error.status,
    headers: { 'x-amzn-query-error': `${error.code};${fault}` },
    body: JSON.stringify({ __type: type, message: error.message }),
  };
}

/** A message attribute as the JSON protocol carries it (BinaryValue base64-encoded). */
export interface MessageAttributeValue {
  DataType: string;
  StringValue?: string;
  BinaryValue?: string;
}

/** MD5 hex digest of the UTF-8 body, the `MD5OfMessageBody`/`MD5OfBody` the SDK verifies. */
export function md5OfBody(body: string): string {
  return createHash('md5').update(body, 'utf8').digest('hex');
}

/**
 * `MD5OfMessageAttributes` as SQS computes it (Developer Guide, "Calculating the MD5 message digest
 * for message attributes"): for each attribute, sorted by name, the name, the data type and the
 * value each as a 4-byte big-endian length and their bytes, with a transport byte (1 for String and
 * Number types, 2 for Binary) between the type and the value. Undefined for no attributes, as SQS
 * omits the field then. `@aws-sdk/middleware-sdk-sqs` (3.1175) verifies only the body digests; this
 * one is checked by the tests against digests published by an independent implementation.
 */
export function md5OfMessageAttributes(
  attributes: Record<string, MessageAttributeValue>,
): string | undefined {
  const names = Object.keys(attributes).sort();
  if (names.length === 0) return undefined;
  const hash = createHash('md5');
  const field = (bytes: Buffer) => {
    const length = Buffer.alloc(4);
    length.writeUInt32BE(bytes.length);
    hash.update(length).update(bytes);
  };
  for (const name of names) {
    const value = attributes[name] as MessageAttributeValue;
    field(Buffer.from(name, 'utf8'));
    field(Buffer.from(value.DataType, 'utf8'));
    const binary = value.DataType.startsWith('Binary');
    hash.update(Buffer.from([binary ? 2 : 1]));
    field(
      binary ? Buffer.from(value.BinaryValue ?? '', 'base64') : Buffer.from(value.StringValue ?? '', 'utf8'),
    );
  }
  return hash.digest('hex');
}

// The characters SQS accepts in a body or a string attribute (SendMessage API reference):
// #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF. A lone surrogate
// is outside all of them, so the `u` flag's code-point matching catches it too.
const REFUSED_CHARACTER = /[^\t\n\r\u0020-\uD7FF\uE000-\uFFFD\u{10000}-\u{10FFFF}]/u;

/** Throws InvalidMessageContents for a character SQS refuses. */
export function checkCharacters(text: string, what: string): void {
  if (REFUSED_CHARACTER.test(text)) {
    throw sqsError(
      'InvalidMessageContents',
      `Invalid binary character was found in the message ${what}, the set of allowed characters is #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF`,
    );
  }
}

// Message attribute names (Developer Guide, "Message attribute components"): A-Z a-z 0-9 _ - .,
// at most 256 characters, not starting with AWS. or Amazon. (any case), no leading, trailing or
// doubled period; at most 10 attributes a message.
const ATTRIBUTE_NAME = /^(?!\.)(?!.*\.\.)(?!.*\.$)(?!aws\.)(?!amazon\.)[A-Za-z0-9_.-]{1,256}$/i;
export const MAX_MESSAGE_ATTRIBUTES = 10;

/**
 * Checks a message's body and attributes and returns its size in bytes as SQS counts it against
 * `MaximumMessageSize`: the body's UTF-8 bytes plus every attribute's name, data type and value
 * (Developer Guide, "Message attribute components": all components count toward the limit).
 * Throws InvalidParameterValue, MissingParameter or InvalidMessageContents.
 */
export function checkMessage(
  body: unknown,
  attributes: Record<string, MessageAttributeValue> | undefined,
): number {
  if (typeof body !== 'string' || body.length === 0) {
    throw sqsError('MissingParameter', 'The request must contain the parameter MessageBody.');
  }
  checkCharacters(body, 'body');
  let size = Buffer.byteLength(body, 'utf8');
  const entries = Object.entries(attributes ?? {});
  if (entries.length > MAX_MESSAGE_ATTRIBUTES) {
    throw invalidParameter(
      `Number of message attributes [${entries.length}] exceeds the allowed maximum [${MAX_MESSAGE_ATTRIBUTES}].`,
    );
  }
  for (const [name, value] of entries) {
    if (!ATTRIBUTE_NAME.test(name)) throw invalidParameter(`Message attribute name '${name}' is invalid.`);
    const type = value?.DataType;
    if (
      typeof type !== 'string' ||
      !/^(String|Number|Binary)(\.[^\s]{1,})?$/.test(type) ||
      type.length > 256
    ) {
      throw invalidParameter(`The message attribute '${name}' has an invalid message attribute type.`);
    }
    size += Buffer.byteLength(name, 'utf8') + Buffer.byteLength(type, 'utf8');
    if (type.startsWith('Binary')) {
      if (typeof value.BinaryValue !== 'string' || value.BinaryValue.length === 0) {
        throw invalidParameter(
          `The message attribute '${name}' must contain a non-empty message attribute value.`,
        );
      }
      size += Buffer.from(value.BinaryValue, 'base64').length;
    } else {
      const text = value.StringValue;
      if (typeof text !== 'string' || text.length === 0) {
        throw invalidParameter(
          `The message attribute '${name}' must contain a non-empty message attribute value.`,
        );
      }
      if (type.startsWith('Number') && !Number.isFinite(Number(text))) {
        throw invalidParameter(`Can't cast the value of message (user) attribute '${name}' to a number.`);
      }
      checkCharacters(text, `attribute ${name}`);
      size += Buffer.byteLength(text, 'utf8');
    }
  }
  return size;
}

/** An integer parameter within [min, max], else InvalidParameterValue naming it. */
export function integerIn(value: unknown, name: string, min: number, max: number, fallback: number): number {
  if (value === undefined || value === null) return fallback;
  const n = typeof value === 'string' ? Number(value) : value;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) {
    throw invalidParameter(
      `Value ${String(value)} for parameter ${name} is invalid. Reason: must be between ${min} and ${max}.`,
    );
  }
  return n;
}

// Batch entry ids (SendMessageBatchRequestEntry.Id): up to 80 of A-Z a-z 0-9 - _.
const BATCH_ENTRY_ID = /^[A-Za-z0-9_-]{1,80}$/;
/** SQS's limit on the entries of SendMessageBatch, DeleteMessageBatch and ChangeMessageVisibilityBatch. */
export const MAX_BATCH_ENTRIES = 10;

/** The request-level checks of a batch: 1–10 entries, valid and distinct ids. */
export function checkBatch(entries: unknown): { Id: string }[] {
  if (!Array.isArray(entries) || entries.length === 0) {
    throw sqsError('EmptyBatchRequest', 'There should be at least one entry in the request.');
  }
  if (entries.length > MAX_BATCH_ENTRIES) {
    throw sqsError(
      'TooManyEntriesInBatchRequest',
      `Maximum number of entries per request are ${MAX_BATCH_ENTRIES}. You have sent ${entries.length}.`,
    );
  }
  const seen = new Set<string>();
  for (const entry of entries as { Id?: unknown }[]) {
    const id = entry?.Id;
    if (typeof id !== 'string' || !BATCH_ENTRY_ID.test(id)) {
      throw sqsError(
        'InvalidBatchEntryId',
        'A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.',
      );
    }
    if (seen.has(id)) throw sqsError('BatchEntryIdsNotDistinct', `Id ${id} repeated.`);
    seen.add(id);
  }
  return entries as { Id: string }[];
}

/** Writes a JSON 1.0 answer with a request id, as SQS does. */
export function send(
  res: ServerResponse,
  status: number,
  text: string,
  headers: Record<string, string> = {},
): void {
  res.writeHead(status, {
    'content-type': 'application/x-amz-json-1.0',
    'content-length': Buffer.byteLength(text),
    'x-amzn-requestid': randomUUID(),
    ...headers,
  });
  res.end(text);
}

/** Writes an SQS error answer (see {@link errorResponse}). */
export function sendError(res: ServerResponse, error: SqsError): void {
  const { status, headers, body } = errorResponse(error);
  send(res, status, body, headers);
}
