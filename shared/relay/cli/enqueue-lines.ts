/**
 * `outbox enqueue`: events as JSON lines, for backfills. Every line is validated before anything is
 * written, so a typo on line 90,000 does not leave the first 89,999 half-imported; re-running the
 * same input is safe when the lines carry `idempotencyKey`s.
 */
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import type { Sql } from '../../platform/index.ts';
import { OutboxValidationError, parseExactJson } from '../../platform/index.ts';
import { enqueueMany, type OutboxEvent, validateEvent } from '../../producer/index.ts';
import { checkKnownFields } from '../../producer/validation.ts';

/** Invalid lines reported before giving up reading more errors. */
const MAX_REPORTED_ERRORS = 50;

/** How far {@link enqueueFromLines} got: events written so far, of `total`. */
export interface EnqueueProgress {
  /** Events handled so far (enqueued + duplicates). */
  done: number;
  /** Valid events read from the input. */
  total: number;
  enqueued: number;
  duplicates: number;
}

/** Outcome of {@link enqueueFromLines}. */
export interface EnqueueLinesResult {
  enqueued: number;
  duplicates: number;
  /** Invalid lines (1-based line numbers); when any, nothing was written. */
  errors: { line: number; message: string }[];
}

/**
 * Reads JSON lines (`{"type","aggregateType","aggregateId","payload", "source"?, "idempotencyKey"?}`),
 * validates all, then writes them in transactions of `batchSize`. Blank lines are skipped. A
 * duplicate (an `idempotencyKey` already enqueued) is counted apart, never as written.
 */
export async function enqueueFromLines(
  sql: Sql,
  input: AsyncIterable<string | Buffer>,
  options: {
    defaultSource?: string;
    maxEntryBytes?: number;
    batchSize: number;
    /** Called after each committed batch. */
    progress?: (p: EnqueueProgress) => void;
    /** Called every 10,000 lines while the input is read and validated. */
    reading?: (lines: number) => void;
  },
): Promise<EnqueueLinesResult> {
  const events: OutboxEvent[] = [];
  const errors: EnqueueLinesResult['errors'] = [];
  const lines = createInterface({ input: Readable.from(input), crlfDelay: Number.POSITIVE_INFINITY });
  let n = 0;
  for await (const text of lines) {
    n++;
    if (n % 10_000 === 0) options.reading?.(n);
    if (text.trim() === '') continue;
    try {
      const event = parseLine(text);
      validateEvent(event, { defaultSource: options.defaultSource, maxEntryBytes: options.maxEntryBytes });
      events.push(event);
    } catch (error) {
      let message = (error as Error).message;
      // The library's error knows no CLI: say how this command supplies a Source.
      if (
        error instanceof OutboxValidationError &&
        error.field === 'source' &&
        message === 'source: is required'
      )
        message += '; give the line a "source", or pass --source or set OUTBOX_DEFAULT_SOURCE';
      if (errors.length < MAX_REPORTED_ERRORS) errors.push({ line: n, message });
    }
  }
  if (errors.length > 0) return { enqueued: 0, duplicates: 0, errors };

  let enqueued = 0;
  let duplicates = 0;
  const batchSize = Math.max(1, options.batchSize);
  for (let i = 0; i < events.length; i += batchSize) {
    const batch = events.slice(i, i + batchSize);
    const results = await sql.begin((tx) =>
      enqueueMany(tx, batch, { defaultSource: options.defaultSource, maxEntryBytes: options.maxEntryBytes }),
    );
    for (const r of results) {
      if (r.duplicate) duplicates++;
      else enqueued++;
    }
    options.progress?.({ done: i + batch.length, total: events.length, enqueued, duplicates });
  }
  return { enqueued, duplicates, errors };
}

function parseLine(text: string): OutboxEvent {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (cause) {
    throw new OutboxValidationError('line', `is not valid JSON (${(cause as Error).message})`);
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    throw new OutboxValidationError('line', 'must be a JSON object');
  }
  checkKnownFields(value);
  const event = value as OutboxEvent;
  // The payload again, with every number kept as written (1234567890123456789 would otherwise
  // be enqueued as 1234567890123456800): it is written to the database digit for digit.
  if ('payload' in event)
    event.payload = (parseExactJson(text) as { payload: OutboxEvent['payload'] }).payload;
  return event;
}
