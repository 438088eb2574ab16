/**
 * The session and transaction an invocation runs in, read when the event is recorded and again
 * before COMMIT: two reads of one fact, so they share a module.
 */
import type { Tx } from '../../platform/db.ts';

/** The backend and the transaction id (int8 as a string; null while none is assigned). */
export interface DbTransactionIdentity {
  pid: number;
  xid: string | null;
}

/** The backend and the transaction id, assigning one (the inbox record was just written). */
export async function readTransactionIdentity(tx: Tx): Promise<DbTransactionIdentity | undefined> {
  const [identity] = await tx<DbTransactionIdentity[]>`
          select pg_backend_pid() as pid, txid_current()::text as xid`;
  return identity;
}

/**
 * The backend and the transaction id if one is assigned. Fails with 25P02 when a statement failed
 * in the transaction (even one the handler caught).
 */
export async function readAssignedTransactionIdentity(tx: Tx): Promise<DbTransactionIdentity | undefined> {
  const [now] = await tx<DbTransactionIdentity[]>`
      select pg_backend_pid() as pid, txid_current_if_assigned()::text as xid`;
  return now;
}
