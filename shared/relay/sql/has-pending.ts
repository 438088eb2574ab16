/** Whether any row is still to publish. */
import type { Sql } from '../../platform/index.ts';
import { pendingRow } from './conditions.ts';

/** True while some row is neither published nor dead-lettered (including rows in backoff or leased). */
export async function hasPending(sql: Sql): Promise<boolean> {
  const [row] = await sql<{ pending: boolean }[]>`
    select exists (select 1 from outbox where ${pendingRow(sql)}) as pending
  `;
  return row?.pending ?? false;
}
