/** Spends the attempt of successors whose round is about to be sent: one statement, token-guarded. */
import type { Sql } from '../../platform/index.ts';

/**
 * Starts the publication of successors (events claimed behind their aggregate's head): each one's
 * `attempts` goes up by one just before its round is sent, and not at claim, so that a relay that
 * dies while sending an earlier event of the aggregate leaves them as they were. Heads spend their
 * attempt at claim (see `claimBatch`).
 * @param ids the successors about to be sent (int8 ids as strings)
 * @returns for each row this lease still owned, its attempts after this one (claims as head plus
 *   started rounds); a row missing from it was lost to another relay and must not be sent
 */
export async function startRound(
  sql: Sql,
  leaseToken: string,
  ids: readonly string[],
): Promise<Map<string, number>> {
  if (ids.length === 0) return new Map();
  const rows = await sql<{ id: string; attempts: number }[]>`
    update outbox
    set attempts = attempts + 1
    where id = any(${ids}::int8[]) and lease_token = ${leaseToken}::uuid
    returning id, attempts
  `;
  return new Map(rows.map((r) => [r.id, r.attempts]));
}
