/**
 * Dead-letter operations, for `outbox dead-letters …` and for teams building their own admin tools:
 * list, show, replay (back to pending), discard (kept for audit, never published).
 */
import type { Queryable } from '../../platform/index.ts';
import { compactJsonb, OutboxValidationError } from '../../platform/index.ts';
import {
  type DbDeadLetter,
  discardDeadLetterRows,
  replayDeadLetterRows,
  selectDeadLetter,
  selectDeadLetterIds,
  selectDeadLetterRefs,
  selectDeadLetters,
} from './sql/index.ts';

/** Which dead letters an operation applies to. Every field narrows the selection. */
export interface DeadLetterFilter {
  /** Event type (DetailType). */
  type?: string;
  /** `aggregateType` or `aggregateType/aggregateId`. */
  aggregate?: string;
  /**
   * Dead-lettered at or after this instant (a `Date`), or within the last `secondsAgo` seconds
   * counted back from the database's `now()`. `dead_lettered_at` is written with the database's
   * clock, so a duration is measured on it too, never on the caller's clock (which may be off).
   */
  since?: Date | { secondsAgo: number };
  /** Include discarded dead letters (default false). */
  includeDiscarded?: boolean;
}

/** A dead letter as listed (without the payload). */
export interface DeadLetter {
  /** Row id (int8 as a string). */
  id: string;
  eventId: string;
  type: string;
  source: string;
  aggregateType: string;
  aggregateId: string;
  /** Per-aggregate sequence (int8 as a string, exact at any size). */
  sequence: string;
  attempts: number;
  lastError: string | null;
  createdAt: Date;
  deadLetteredAt: Date;
  discardedAt: Date | null;
}

/** A dead letter with its payload and trace header, as `show` prints it. */
export interface DeadLetterDetail extends DeadLetter {
  /**
   * The payload as compact JSON text, every number as stored (what the relay sends as `data`).
   * `JSON.parse` it for a plain object, knowing that it rounds numbers beyond a double's precision;
   * `parseExactJson` keeps them for re-serialising.
   */
  payloadJson: string;
  traceHeader: string | null;
}

function toDeadLetter(r: DbDeadLetter): DeadLetter {
  return {
    id: r.id,
    eventId: r.event_id,
    type: r.event_type,
    source: r.source,
    aggregateType: r.aggregate_type,
    aggregateId: r.aggregate_id,
    sequence: r.sequence,
    attempts: r.attempts,
    lastError: r.last_error,
    createdAt: r.created_at,
    deadLetteredAt: r.dead_lettered_at,
    discardedAt: r.discarded_at,
  };
}

/**
 * Parses an id given by an operator: a row id (digits) or an event id (uuid).
 * @throws {OutboxValidationError} for anything else
 */
export function parseEventRef(ref: string): { rowId: string } | { eventId: string } {
  if (/^\d{1,19}$/.test(ref)) return { rowId: ref };
  if (/^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i.test(ref))
    return { eventId: ref.toLowerCase() };
  throw new OutboxValidationError('id', `"${ref}" is neither a row id nor an event id (uuid)`);
}

function splitAggregate(aggregate: string | undefined): { type: string | null; id: string | null } {
  if (!aggregate) return { type: null, id: null };
  const slash = aggregate.indexOf('/');
  return slash < 0
    ? { type: aggregate, id: null }
    : { type: aggregate.slice(0, slash), id: aggregate.slice(slash + 1) };
}

/**
 * The two forms of {@link DeadLetterFilter.since} as statement parameters: an instant, or seconds
 * before the database's `now()`.
 * @throws {OutboxValidationError} naming `since` for an invalid date or a negative or non-finite duration
 */
function sinceParameters(since: DeadLetterFilter['since']): { at: Date | null; secondsAgo: number | null } {
  if (since === undefined) return { at: null, secondsAgo: null };
  if (since instanceof Date) {
    if (Number.isNaN(since.getTime())) throw new OutboxValidationError('since', 'is an invalid date');
    return { at: since, secondsAgo: null };
  }
  const seconds = since?.secondsAgo;
  if (typeof seconds !== 'number' || !Number.isFinite(seconds) || seconds < 0) {
    throw new OutboxValidationError(
      'since',
      `must be a Date or { secondsAgo: n } with n a number of seconds, 0 or more (got ${String(seconds)})`,
    );
  }
  return { at: null, secondsAgo: seconds };
}

/** Row ids of the dead letters matching `filter`, oldest first. */
async function selectIds(sql: Queryable, filter: DeadLetterFilter, limit: number): Promise<string[]> {
  const agg = splitAggregate(filter.aggregate);
  const since = sinceParameters(filter.since);
  return selectDeadLetterIds(
    sql,
    {
      includeDiscarded: filter.includeDiscarded ?? false,
      type: filter.type ?? null,
      aggregateType: agg.type,
      aggregateId: agg.id,
      sinceAt: since.at,
      sinceSecondsAgo: since.secondsAgo,
    },
    limit,
  );
}

/**
 * Lists dead letters matching `filter`, oldest first.
 * @param limit at most this many (default 100)
 */
export async function listDeadLetters(
  sql: Queryable,
  filter: DeadLetterFilter = {},
  limit = 100,
): Promise<DeadLetter[]> {
  const ids = await selectIds(sql, filter, limit);
  if (ids.length === 0) return [];
  const rows = await selectDeadLetters(sql, ids);
  return rows.map(toDeadLetter);
}

/**
 * One dead letter with its payload, by row id or event id.
 * @returns undefined when no dead letter has that id
 * @throws {OutboxValidationError} when `ref` is not an id
 */
export async function showDeadLetter(sql: Queryable, ref: string): Promise<DeadLetterDetail | undefined> {
  const key = parseEventRef(ref);
  const rowId = 'rowId' in key ? key.rowId : null;
  const eventId = 'eventId' in key ? key.eventId : null;
  const row = await selectDeadLetter(sql, rowId, eventId);
  if (!row) return undefined;
  return {
    ...toDeadLetter(row),
    payloadJson: compactJsonb(row.payload ?? '{}'),
    traceHeader: row.trace_header ?? null,
  };
}

/** Resolves operator ids (row ids or event ids) to the row ids of dead letters. */
export async function resolveDeadLetterIds(
  sql: Queryable,
  refs: readonly string[],
): Promise<{ ids: string[]; unknown: string[] }> {
  const keys = refs.map(parseEventRef);
  const rowIds = keys.flatMap((k) => ('rowId' in k ? [k.rowId] : []));
  const eventIds = keys.flatMap((k) => ('eventId' in k ? [k.eventId] : []));
  const rows = await selectDeadLetterRefs(sql, rowIds, eventIds);
  const found = new Set(rows.flatMap((r) => [r.id, r.event_id]));
  return { ids: rows.map((r) => r.id), unknown: refs.filter((r) => !found.has(r.toLowerCase())) };
}

/** Row ids of every dead letter matching `filter` (for `--all`). */
export function findDeadLetterIds(sql: Queryable, filter: DeadLetterFilter = {}): Promise<string[]> {
  return selectIds(sql, filter, 1_000_000);
}

/**
 * Puts dead letters back to pending: attempts reset to 0, available now, error cleared. The event
 * keeps its `eventId` and `sequence`. Under the `block` policy the rest of its aggregate was waiting
 * and follows it in order; under `continue` later events may already be out, so consumers see this
 * one late (its `sequence` tells them).
 * @param ids row ids (see {@link resolveDeadLetterIds})
 * @returns the number of rows replayed
 */
export async function replayDeadLetters(sql: Queryable, ids: readonly string[]): Promise<number> {
  if (ids.length === 0) return 0;
  return replayDeadLetterRows(sql, ids);
}

/**
 * Discards dead letters: kept for audit (until the dead-letter retention prunes them), never
 * published, and no longer holding back their aggregate under the `block` policy.
 * @returns the number of rows discarded
 */
export async function discardDeadLetters(sql: Queryable, ids: readonly string[]): Promise<number> {
  if (ids.length === 0) return 0;
  return discardDeadLetterRows(sql, ids);
}
