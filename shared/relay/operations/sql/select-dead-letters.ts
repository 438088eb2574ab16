/** Reads dead letters by row id, as listed and as shown (with the payload). */
import type { Queryable } from '../../../platform/index.ts';
import { deadLetterRow } from './conditions.ts';

/** A dead letter's row (`outbox`). */
export interface DbDeadLetter {
  id: string;
  event_id: string;
  event_type: string;
  source: string;
  aggregate_type: string;
  aggregate_id: string;
  sequence: string;
  attempts: number;
  last_error: string | null;
  created_at: Date;
  dead_lettered_at: Date;
  discarded_at: Date | null;
  /** jsonb's text form (`payload::text`), never parsed into numbers. */
  payload?: string;
  trace_header?: string | null;
}

/** The rows of `ids` (int8 as strings), without the payload, oldest first. */
export function selectDeadLetters(sql: Queryable, ids: readonly string[]): Promise<DbDeadLetter[]> {
  return sql<DbDeadLetter[]>`
    select id, event_id, event_type, source, aggregate_type, aggregate_id, sequence, attempts, last_error,
           created_at, dead_lettered_at, discarded_at
    from outbox where id = any(${ids}::int8[]) order by dead_lettered_at, id`;
}

/** One dead letter with its payload and trace header, by row id or event id (the other null). */
export async function selectDeadLetter(
  sql: Queryable,
  rowId: string | null,
  eventId: string | null,
): Promise<DbDeadLetter | undefined> {
  const [row] = await sql<DbDeadLetter[]>`
    select id, event_id, event_type, source, aggregate_type, aggregate_id, sequence, attempts, last_error,
           created_at, dead_lettered_at, discarded_at, payload::text as payload, trace_header
    from outbox
    where ${deadLetterRow(sql)}
      and (id = ${rowId}::int8 or event_id = ${eventId}::uuid)`;
  return row;
}

/** The dead letters among these row ids and event ids: their row id and event id. */
export function selectDeadLetterRefs(
  sql: Queryable,
  rowIds: readonly string[],
  eventIds: readonly string[],
): Promise<{ id: string; event_id: string }[]> {
  return sql<{ id: string; event_id: string }[]>`
    select id, event_id from outbox
    where ${deadLetterRow(sql)}
      and (id = any(${rowIds}::int8[]) or event_id = any(${eventIds}::uuid[]))`;
}
