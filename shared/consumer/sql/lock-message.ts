/** Reads a consumer's existing record under a key, locked until the transaction ends. */
import type { Tx } from '../../platform/db.ts';

/** The columns of `inbox_message` that decide what a second delivery under the same key is. */
export interface DbMessageOutcome {
  outcome: string;
  /** Null for a record written before event ids were kept. */
  event_id: string | null;
}

/** Locks the record of `key` for `consumer`; undefined when there is none (it was pruned meanwhile). */
export async function lockMessage(
  tx: Tx,
  consumer: string,
  key: string,
): Promise<DbMessageOutcome | undefined> {
  const [existing] = await tx<DbMessageOutcome[]>`
      select outcome, event_id from outbox.inbox_message
      where consumer = ${consumer} and message_key = ${key}
      for update`;
  return existing;
}
