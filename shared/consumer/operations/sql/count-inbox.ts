/**
 * Counts of a consumer's inbox in its own database (docs/consumer-operations.md#a-consumer-in-its-own-database):
 * what pruning would delete, and the parked events per consumer. Both read only the columns the
 * monitor role may read (`consumer`, `message_key`, `outcome`, `processed_at` of `inbox_message`).
 */
import type { Queryable } from '../../../platform/db.ts';
import { supersededChains } from './delete-inbox-expired.ts';

/** Rows past the inbox's retention, per table (int8 as strings). */
export interface DbInboxExpired {
  messages: string;
  chains: string;
  gaps: string;
  failures: string;
}

/**
 * Counts what {@link deleteExpiredMessages}, {@link deleteExpiredChains}, {@link deleteExpiredGaps}
 * and {@link deleteExpiredFailures} would delete at this retention (seconds), on the same conditions.
 */
export async function countInboxExpired(
  sql: Queryable,
  retentionSeconds: number,
): Promise<DbInboxExpired | undefined> {
  const [row] = await sql<DbInboxExpired[]>`
    select
      (select count(*) from outbox.inbox_message
       where processed_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})
         and outcome not in ('parked', 'replaying')) as messages,
      (select count(*) from outbox.inbox_aggregate s where ${supersededChains(sql, retentionSeconds)}) as chains,
      (select count(*) from outbox.inbox_gap
       where last_seen_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})) as gaps,
      (select count(*) from outbox.inbox_failed
       where last_failed_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})) as failures`;
  return row;
}

/** One consumer's parked events (those being replayed included). */
export interface DbInboxParked {
  consumer: string;
  parked: string;
}

/**
 * Parked events of each named consumer, 0 for one with none, in the order given; read from the
 * partial index on parked records (migration 010).
 */
export function countInboxParked(sql: Queryable, consumers: readonly string[]): Promise<DbInboxParked[]> {
  return sql<DbInboxParked[]>`
    select c.consumer,
           (select count(*) from outbox.inbox_message m
            where m.consumer = c.consumer and m.outcome in ('parked', 'replaying')) as parked
    from pg_catalog.unnest(${consumers}::text[]) with ordinality as c(consumer, ord)
    order by c.ord`;
}
