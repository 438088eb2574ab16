/** Whether any row is still to publish, and how many wait behind dead letters under `block`. */
import { countFromDatabase, type Queryable, type Sql } from '../../platform/index.ts';
import { pendingRow } from './conditions.ts';

/** The settings that decide whether a dead letter holds back the rest of its aggregate. */
export interface HoldBackPolicy {
  ordering: 'aggregate' | 'none';
  deadLetterPolicy: 'continue' | 'block';
}

/** Events that no claim will take until an operator replays or discards the dead letter before them. */
export interface HeldBack {
  /** Pending events behind a dead letter of their aggregate. */
  events: number;
  /** Aggregates they belong to. */
  aggregates: number;
}

/**
 * True while some row is neither published nor dead-lettered and a relay can claim it, now or
 * later (rows in backoff or leased included). Under the `block` policy with per-aggregate ordering,
 * rows waiting behind a dead letter of their aggregate are not counted: no claim takes them until
 * an operator acts, so a relay that waits for them (`--until-empty`) would wait for ever.
 * @param policy default: `continue` (every pending row counts)
 */
export async function hasPending(sql: Sql, policy?: HoldBackPolicy): Promise<boolean> {
  const block = holdsBack(policy);
  const [row] = await sql<{ pending: boolean }[]>`
    select exists (
      select 1 from outbox o
      where ${pendingRow(sql)}
        and not (${block}::boolean and ${behindDeadLetter(sql)})
    ) as pending
  `;
  return row?.pending ?? false;
}

/**
 * Counts the pending events that wait behind a dead letter of their aggregate (under `block` with
 * per-aggregate ordering; none otherwise). Reads only unfinished rows (partial indexes).
 */
export async function countHeldBack(sql: Queryable, policy: HoldBackPolicy): Promise<HeldBack> {
  if (!holdsBack(policy)) return { events: 0, aggregates: 0 };
  const [row] = await sql<{ events: string; aggregates: string }[]>`
    select count(*) as events, count(distinct (o.aggregate_type, o.aggregate_id)) as aggregates
    from outbox o
    where ${pendingRow(sql)} and ${behindDeadLetter(sql)}
  `;
  return {
    events: countFromDatabase(row?.events, 'held-back events'),
    aggregates: countFromDatabase(row?.aggregates, 'held-back aggregates'),
  };
}

function holdsBack(policy: HoldBackPolicy | undefined): boolean {
  return policy?.ordering === 'aggregate' && policy.deadLetterPolicy === 'block';
}

/** Row `o` has a dead letter of its aggregate before it that nobody replayed or discarded yet. */
function behindDeadLetter(sql: Queryable) {
  return sql`exists (
    select 1 from outbox d
    where d.aggregate_type = o.aggregate_type and d.aggregate_id = o.aggregate_id
      and d.sequence < o.sequence and d.published_at is null
      and d.dead_lettered_at is not null and d.discarded_at is null
  )`;
}
