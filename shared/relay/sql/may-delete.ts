/** Whether this session may delete outbox rows: what no published history needs of the relay's role. */
import type { Sql } from '../../platform/index.ts';

/**
 * Reads whether the session's user holds DELETE on the outbox (the table its `search_path` finds,
 * as every relay statement does).
 * @returns the user's name, and whether it may delete
 * @throws the database's error (undefined_table when the outbox is not migrated)
 */
export async function mayDeleteOutboxRows(sql: Sql): Promise<{ user: string; mayDelete: boolean }> {
  const [row] = await sql<{ user: string; may_delete: boolean }[]>`
    select current_user as user, has_table_privilege('outbox', 'delete') as may_delete`;
  return { user: String(row?.user), mayDelete: row?.may_delete === true };
}
