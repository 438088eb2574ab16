/**
 * The claim: take a leased batch of outbox rows in one statement.
 *
 * Locking strategy. Candidate rows are locked with `FOR UPDATE SKIP LOCKED`, so concurrent relays
 * never wait for each other and never take the same row. The lease (random token, expiry computed
 * from the database's `now()`) is written in the same statement, and every later write is guarded
 * by that token, so a relay whose lease expired cannot overwrite the new owner's state.
 *
 * A dead letter holds back its aggregate only under the `block` policy, and only until an operator
 * replays or discards it (`discarded_at`).
 *
 * Ordering (`ordering = 'aggregate'`). Only the head of an aggregate — its earliest unpublished
 * event — may be claimed on its own; the head test sees earlier rows whether or not another relay
 * has them locked, which is what stops SKIP LOCKED from jumping over a locked head to the next
 * event of the same aggregate. With a head, up to `perAggregateLimit − 1` of its successors are
 * claimed too; the publisher sends them one after the other.
 */
import { compactJsonb, type Queryable } from '../../platform/index.ts';
import type { ClaimedEvent } from '../types.ts';
import { pendingRow, unpublishedRow } from './conditions.ts';

/** Parameters of one claim. */
export interface ClaimOptions {
  /** Random uuid identifying this claim; every later write for these rows must present it. */
  leaseToken: string;
  /** Lease length, seconds, added to the database clock. */
  leaseSeconds: number;
  /** Most heads (aggregates, or rows when ordering is `none`) to claim. */
  batchSize: number;
  /** Events per aggregate per claim, head included. */
  perAggregateLimit: number;
  ordering: 'aggregate' | 'none';
  /** With `block`, a dead-lettered event holds back the rest of its aggregate. */
  deadLetterPolicy: 'continue' | 'block';
}

/** An outbox row as the claim returns it. */
export interface DbClaimedRow {
  id: string;
  event_id: string;
  aggregate_type: string;
  aggregate_id: string;
  /** int8, as decimal text. */
  sequence: string;
  /** NULL for rows enqueued before migration 010. */
  type_sequence: string | null;
  event_type: string;
  source: string;
  /** jsonb's text form (`payload::text`): parsing it would round its numbers to doubles. */
  payload: string;
  trace_header: string | null;
  created_at: Date;
  attempts: number;
  /** True for the row the claim took as its aggregate's head (always true with ordering `none`). */
  is_head: boolean;
}

/** The one mapping from {@link DbClaimedRow} to {@link ClaimedEvent}. */
export function toClaimedEvent(row: DbClaimedRow): ClaimedEvent {
  return {
    id: row.id,
    eventId: row.event_id,
    aggregateType: row.aggregate_type,
    aggregateId: row.aggregate_id,
    sequence: row.sequence,
    typeSequence: row.type_sequence ?? undefined,
    type: row.event_type,
    source: row.source,
    // jsonb's text without the spaces it adds: every number exactly as stored, and exactly the
    // bytes enqueue measured (outbox_json_bytes) when it checked the entry's size.
    payloadJson: compactJsonb(row.payload),
    traceHeader: row.trace_header,
    createdAt: row.created_at,
    attempts: row.attempts,
    isHead: row.is_head,
  };
}

/**
 * Claims up to `batchSize` heads (and their successors). A head's `attempts` is incremented at
 * claim time, so that a row which crashes the relay every time still runs out of attempts; a
 * successor spends nothing here, only when its own round starts (`startRound`): a relay that
 * dies while sending the head has not started the successors' publication.
 * @returns the claimed events, ordered by aggregate then sequence
 */
export async function claimBatch(sql: Queryable, o: ClaimOptions): Promise<ClaimedEvent[]> {
  const rows = o.ordering === 'none' ? await claimUnordered(sql, o) : await claimOrdered(sql, o);
  return rows.map(toClaimedEvent);
}

function claimUnordered(sql: Queryable, o: ClaimOptions) {
  return sql<DbClaimedRow[]>`
    with picked as (
      select id from outbox
      where ${pendingRow(sql)}
        and available_at <= now()
        and (lease_expires_at is null or lease_expires_at <= now())
      order by available_at, id
      limit ${o.batchSize}
      for update skip locked
    )
    update outbox o
    set lease_token = ${o.leaseToken}::uuid,
        lease_expires_at = now() + make_interval(secs => ${o.leaseSeconds}),
        attempts = o.attempts + 1
    where o.id = any(array(select id from picked))
    returning o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.sequence, o.type_sequence, o.event_type, o.source,
              o.payload::text as payload, o.trace_header, o.created_at, o.attempts, true as is_head
  `;
}

function claimOrdered(sql: Queryable, o: ClaimOptions) {
  const block = o.deadLetterPolicy === 'block';
  // Parking: when this claim takes an aggregate's head, that aggregate's events beyond the
  // claimed group and the next head (head + perAggregateLimit) get available_at pushed out by a
  // lease length. The head walk then steps over a long backlog instead of re-reading it on every
  // claim, so one hot aggregate cannot starve the rest. Only the owner of an aggregate's head
  // parks its rows, and the owner unparks the next event when its group completes
  // (unparkNextEvents); a park only ever delays a row, never loses it.
  return sql<DbClaimedRow[]>`
    with heads as (
      select h.id, h.aggregate_type, h.aggregate_id, h.sequence
      from outbox h
      where ${pendingRow(sql)}
        and h.available_at <= now()
        and (h.lease_expires_at is null or h.lease_expires_at <= now())
        -- the head: the lowest unfinished sequence of its aggregate (ORDER BY … LIMIT 1 reads
        -- one entry of the (aggregate, sequence) index, whatever the statistics say)
        and h.sequence = (
          select p.sequence from outbox p
          where p.aggregate_type = h.aggregate_type and p.aggregate_id = h.aggregate_id
            and ${unpublishedRow(sql)}
            and (p.dead_lettered_at is null or (${block}::boolean and p.discarded_at is null))
          order by p.sequence
          limit 1
        )
      order by h.available_at, h.id
      limit ${o.batchSize}
      for update skip locked
    ),
    parked as (
      update outbox w
      set available_at = now() + make_interval(secs => ${o.leaseSeconds})
      -- re-checked on the row's latest version when this waited for another claim's lock: a row
      -- that claim leased meanwhile is its own, not ours to park
      where (w.lease_expires_at is null or w.lease_expires_at <= now())
        and w.id = any(array(
        select x.id
        from heads h
        cross join lateral (
          select b.id from outbox b
          where b.aggregate_type = h.aggregate_type and b.aggregate_id = h.aggregate_id
            and ${pendingRow(sql)}
            and b.available_at <= now()
            and b.sequence > h.sequence + ${o.perAggregateLimit}
          -- bounded work per claim (and a LIMIT keeps the planner on the aggregate's index)
          limit 10000
        ) x
      ))
    ),
    candidates as (
      select h.id as head_id, s.id, s.sequence
      from heads h
      cross join lateral (
        select f.id, f.sequence from outbox f
        where f.aggregate_type = h.aggregate_type and f.aggregate_id = h.aggregate_id
          and f.sequence > h.sequence and ${pendingRow(sql)}
          -- contiguous: stop before any row still leased by another relay (a relay that stopped
          -- this aggregate hands its rows back, but it may not have done so yet)
          and not exists (
            select 1 from outbox l
            where l.aggregate_type = h.aggregate_type and l.aggregate_id = h.aggregate_id
              and l.sequence > h.sequence and l.sequence <= f.sequence
              and ${unpublishedRow(sql)} and l.lease_expires_at > now()
          )
          and not exists (
            select 1 from outbox d
            where ${block}::boolean
              and d.aggregate_type = h.aggregate_type and d.aggregate_id = h.aggregate_id
              and d.sequence > h.sequence and d.sequence < f.sequence
              and d.published_at is null and d.dead_lettered_at is not null and d.discarded_at is null
          )
        order by f.sequence
        limit ${o.perAggregateLimit - 1}
      ) s
    ),
    -- The candidates were chosen from this statement's snapshot: another claim may hold them
    -- (not committed yet) or have leased them since (committed after the snapshot). Lock them, and
    -- a row whose latest version is leased or settled is re-checked out (FOR UPDATE re-evaluates
    -- these conditions on the latest version); a row another claim has locked is skipped.
    locked as materialized (
      select l.id from outbox l
      where l.id = any(array(select id from candidates))
        and ${pendingRow(sql)}
        and (l.lease_expires_at is null or l.lease_expires_at <= now())
      for update skip locked
    ),
    -- Each head's successors are the longest run of its candidates, in sequence order, that this
    -- claim locked: taking a row past one it could not lock would send it before that one.
    -- (A running bool_and over each head's candidates in sequence order: one pass, one hash join.)
    successors as (
      select r.id from (
        select c.id, bool_and(k.id is not null) over (partition by c.head_id order by c.sequence) as run
        from candidates c left join locked k on k.id = c.id
      ) r
      where r.run
    ),
    claimed as (
      select id from heads union all select id from successors
    )
    update outbox o
    set lease_token = ${o.leaseToken}::uuid,
        lease_expires_at = now() + make_interval(secs => ${o.leaseSeconds}),
        -- only the head starts its publication now; a successor's attempt is spent when its round
        -- starts (startRound), so a relay that dies while sending the head costs them nothing
        attempts = o.attempts + case when o.id = any(array(select id from heads)) then 1 else 0 end
    where o.id = any(array(select id from claimed))
      -- every claimed row is locked by this statement; if its latest version is newer than the
      -- snapshot, these are re-evaluated on it, so a row leased meanwhile is never taken over
      and ${pendingRow(sql)}
      and (o.lease_expires_at is null or o.lease_expires_at <= now())
    returning o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.sequence, o.type_sequence, o.event_type, o.source,
              o.payload::text as payload, o.trace_header, o.created_at, o.attempts,
              o.id = any(array(select id from heads)) as is_head
  `;
}
