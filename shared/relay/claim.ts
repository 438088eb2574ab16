/**
 * The claim: take a leased batch of outbox rows in one statement.
 *
 * Locking strategy. Candidate rows are locked with `FOR UPDATE SKIP LOCKED`, so concurrent relays
 * never wait for each other and never take the same row. The lease (random token, expiry computed
 * from the database's `now()`) is written in the same statement, and every later write is guarded
 * by that token, so a relay whose lease expired cannot overwrite the new owner's state.
 *
 * Ordering (`ordering = 'aggregate'`). Only the head of an aggregate — its earliest unpublished
 * event — may be claimed on its own; the NOT EXISTS test sees earlier rows whether or not another
 * relay has them locked, which is what stops SKIP LOCKED from jumping over a locked head to the next
 * event of the same aggregate. With a head, up to `perAggregateLimit − 1` of its successors are
 * claimed too; the publisher sends them one after the other.
 */
import type { Sql } from '../db.ts';
import { type ClaimedEvent, type DbClaimedRow, toClaimedEvent } from './types.ts';

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

/**
 * Claims up to `batchSize` heads (and their successors), incrementing `attempts` at claim time so
 * that a row which crashes the relay every time still runs out of attempts.
 * @returns the claimed events, ordered by aggregate then sequence
 */
export async function claimBatch(sql: Sql, o: ClaimOptions): Promise<ClaimedEvent[]> {
  const rows = o.ordering === 'none' ? await claimUnordered(sql, o) : await claimOrdered(sql, o);
  return rows.map(toClaimedEvent);
}

function claimUnordered(sql: Sql, o: ClaimOptions) {
  return sql<DbClaimedRow[]>`
    with picked as (
      select id from outbox
      where published_at is null and dead_lettered_at is null
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
    from picked
    where o.id = picked.id
    returning o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.sequence, o.event_type, o.source,
              o.payload::text as payload, o.trace_header, o.created_at, o.attempts
  `;
}

function claimOrdered(sql: Sql, o: ClaimOptions) {
  const block = o.deadLetterPolicy === 'block';
  // The scan reads a bounded window of available rows, oldest first, without locking. Rows in it
  // that are not their aggregate's head are *parked* (available_at pushed out by a lease length),
  // so a long backlog of one aggregate is stepped over once instead of re-read by every claim.
  // When an aggregate's claimed group completes, its next event is unparked (unparkNextEvents).
  // Parking only ever delays a row, so a park that races with an unpark costs latency, never a
  // row: the `available_at = seen` guard lets a concurrent unpark win.
  const scanLimit = Math.max(o.batchSize * 4, 200);
  return sql<DbClaimedRow[]>`
    with scan as (
      select c.id, c.aggregate_type, c.aggregate_id, c.sequence, c.available_at,
        not exists (
          select 1 from outbox p
          where p.aggregate_type = c.aggregate_type and p.aggregate_id = c.aggregate_id
            and p.sequence < c.sequence and p.published_at is null
            and (p.dead_lettered_at is null or ${block}::boolean)
        ) as is_head
      from outbox c
      where c.published_at is null and c.dead_lettered_at is null
        and c.available_at <= now()
        and (c.lease_expires_at is null or c.lease_expires_at <= now())
      order by c.available_at, c.id
      limit ${scanLimit}
    ),
    heads as (
      select h.id, h.aggregate_type, h.aggregate_id, h.sequence
      from outbox h
      join scan s on s.id = h.id
      where s.is_head
        and h.published_at is null and h.dead_lettered_at is null
        and h.available_at <= now()
        and (h.lease_expires_at is null or h.lease_expires_at <= now())
      order by s.available_at, s.id
      limit ${o.batchSize}
      for update of h skip locked
    ),
    parked as (
      update outbox w
      set available_at = now() + make_interval(secs => ${o.leaseSeconds})
      from scan s
      where w.id = s.id and not s.is_head
        and w.available_at = s.available_at
        and w.published_at is null and w.dead_lettered_at is null
        and (w.lease_expires_at is null or w.lease_expires_at <= now())
    ),
    successors as (
      select s.id
      from heads h
      cross join lateral (
        select f.id from outbox f
        where f.aggregate_type = h.aggregate_type and f.aggregate_id = h.aggregate_id
          and f.sequence > h.sequence and f.published_at is null and f.dead_lettered_at is null
          and not exists (
            select 1 from outbox d
            where ${block}::boolean
              and d.aggregate_type = h.aggregate_type and d.aggregate_id = h.aggregate_id
              and d.sequence > h.sequence and d.sequence < f.sequence
              and d.published_at is null and d.dead_lettered_at is not null
          )
        order by f.sequence
        limit ${o.perAggregateLimit - 1}
      ) s
    ),
    claimed as (
      select id from heads union all select id from successors
    )
    update outbox o
    set lease_token = ${o.leaseToken}::uuid,
        lease_expires_at = now() + make_interval(secs => ${o.leaseSeconds}),
        attempts = o.attempts + 1
    from claimed
    where o.id = claimed.id
    returning o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.sequence, o.event_type, o.source,
              o.payload::text as payload, o.trace_header, o.created_at, o.attempts
  `;
}
