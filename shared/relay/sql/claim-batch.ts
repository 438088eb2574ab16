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
import { compactJsonb, type Queryable, type Sql } from '../../platform/index.ts';
import type { ClaimedEvent } from '../types.ts';
import {
  claimableNow,
  holdsBackAggregate,
  pendingRow,
  pendingRowById,
  unpublishedRow,
} from './conditions.ts';

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
export async function claimBatch(sql: Queryable, options: ClaimOptions): Promise<ClaimedEvent[]> {
  const rows =
    options.ordering === 'none' ? await claimUnordered(sql, options) : await claimOrdered(sql, options);
  return rows.map(toClaimedEvent);
}

/**
 * {@link claimBatch} in a transaction of its own, committed only once `keep` has taken the answer
 * (it throws to roll back): a claim whose answer comes after its pass gave up, or never comes,
 * leases and charges nothing, so a failed pass always knows the ids it may hold (issue 31: finding
 * them by token read every pending row). The cost is the BEGIN and COMMIT round trips. Should the
 * relay vanish between the answer and COMMIT (a frozen Lambda), the server ends the idle
 * transaction after one lease: the session's `idle_in_transaction_session_timeout`, the relay
 * role's default or the relay pool's startup parameter (no SET or set_config: RDS Proxy pins on
 * them, test/platform/pooler.test.ts).
 */
export function claimBatchKept(
  sql: Sql,
  options: ClaimOptions,
  keep: (events: ClaimedEvent[]) => void,
): Promise<ClaimedEvent[]> {
  return sql.begin(async (tx) => {
    const events = await claimBatch(tx, options);
    keep(events);
    return events;
  });
}

function claimUnordered(sql: Queryable, options: ClaimOptions) {
  return sql<DbClaimedRow[]>`
    with picked as (
      select id from outbox
      where ${pendingRow(sql)} and ${claimableNow(sql)}
      order by available_at, id
      limit ${options.batchSize}
      for update skip locked
    )
    update outbox o
    set lease_token = ${options.leaseToken}::uuid,
        lease_expires_at = now() + pg_catalog.make_interval(secs => ${options.leaseSeconds}),
        attempts = o.attempts + 1
    where o.id = any(array(select id from picked))
    returning o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.sequence, o.type_sequence, o.event_type, o.source,
              o.payload::text as payload, o.trace_header, o.created_at, o.attempts, true as is_head
  `;
}

/**
 * A setting written into the statement's text rather than sent as a parameter: the planner then
 * prices the prepared statement's generic plan as it prices a custom one. With the batch size a
 * parameter, a generic plan assumes a LIMIT reads a tenth of its input, priced above the custom
 * plan, and the claim was planned again at every call (0.3–0.4 ms of the server's CPU per claim,
 * idle polls included). That is for a pool left at `plan_cache_mode` auto (a user's own): the relay's
 * own pools and role plan every call (`RELAY_PLAN_CACHE_MODE`), since a kept plan does not follow
 * the backlog.
 * @param n a boolean, or a non-negative integer (a RangeError otherwise: it goes into SQL text)
 */
function settingInText(sql: Queryable, n: number | boolean) {
  if (typeof n === 'number' && !(Number.isSafeInteger(n) && n >= 0)) {
    throw new RangeError(
      `claim: a setting written into the statement must be a non-negative integer, got ${n}`,
    );
  }
  return sql.unsafe(String(n));
}

/** Rows stepped over that one claim tests for parking, at most. */
const PARK_SCAN_LIMIT = 10_000;

function claimOrdered(sql: Queryable, options: ClaimOptions) {
  const block = settingInText(sql, options.deadLetterPolicy === 'block');
  const batchSize = settingInText(sql, options.batchSize);
  const perAggregateLimit = settingInText(sql, options.perAggregateLimit);
  const successorLimit = settingInText(sql, options.perAggregateLimit - 1);
  // Parking: rows the head walk stepped over (beyond their aggregate's next group, or behind a
  // blocking dead letter) get available_at pushed out by a lease, so a hot aggregate's backlog is
  // not walked by every claim; a park only delays a row (docs/investigations/claim.md#the-claims-parking).
  return sql<DbClaimedRow[]>`
    with heads as (
      select h.id, h.aggregate_type, h.aggregate_id, h.sequence, h.available_at
      from outbox h
      where ${pendingRow(sql)} and ${claimableNow(sql)}
        -- the head: the lowest unfinished sequence of its aggregate (ORDER BY … LIMIT 1 reads
        -- the (aggregate, sequence) index from its lowest entry, whatever the statistics say: one
        -- entry, or more where dead letters that do not hold the aggregate back sit below the
        -- head, under \`continue\` every one, under \`block\` the discarded ones, until prune
        -- removes them). Written
        -- <=, which is the same test (h is one of the rows the subquery reads): for = the
        -- planner guesses 1 row in 200 passes, so it costs the walk of 20,000 rows for 100 heads,
        -- and from about 20,000 pending rows the statement's estimate went past jit_above_cost
        -- (100,000): every claim then spent ~30 ms compiling itself.
        and h.sequence <= (
          select p.sequence from outbox p
          where p.aggregate_type = h.aggregate_type and p.aggregate_id = h.aggregate_id
            and ${holdsBackAggregate(sql, block)}
          order by p.sequence
          limit 1
        )
      order by h.available_at, h.id
      limit ${batchSize}
      for update skip locked
    ),
    -- Where the head walk stopped: at its last head when it found a full batch; no row when it
    -- ran out of available rows (it then stepped over all of them).
    walk_end as (
      select e.available_at, e.id from heads e
      where (select count(*) from heads) >= ${batchSize}
      order by e.available_at desc, e.id desc
      limit 1
    ),
    -- The head's successors to try: its aggregate's next perAggregateLimit − 1 unfinished rows
    -- (a window of outbox_unfinished_by_aggregate_idx, read once, however long the backlog behind
    -- it), each a candidate while the run from the head to it is open: no row still leased by
    -- another relay (a relay that stopped this aggregate hands its rows back, but it may not have
    -- done so yet) and, under \`block\`, no dead letter that was not discarded. A dead letter under
    -- \`continue\` is passed over but takes its place in the window: this claim takes fewer
    -- successors than perAggregateLimit − 1, and the dead letter has left the next claim's window.
    candidates as (
      select h.id as head_id, s.id, s.sequence
      from heads h
      cross join lateral (
        select r.id, r.sequence from (
          select n.id, n.sequence, n.dead_lettered_at,
                 bool_and(
                   (n.lease_expires_at is null or n.lease_expires_at <= now())
                   and (not ${block}::boolean or n.dead_lettered_at is null or n.discarded_at is not null)
                 ) over (order by n.sequence) as open
          from (
            select f.id, f.sequence, f.dead_lettered_at, f.discarded_at, f.lease_expires_at from outbox f
            where f.aggregate_type = h.aggregate_type and f.aggregate_id = h.aggregate_id
              and ${unpublishedRow(sql)} and f.sequence > h.sequence
            order by f.sequence
            limit ${successorLimit}
          ) n
        ) r
        where r.open and r.dead_lettered_at is null
      ) s
    ),
    parked as (
      update outbox w
      set available_at = now() + pg_catalog.make_interval(secs => ${options.leaseSeconds})
      where w.id = any(array(
        -- Locked without waiting: a row another claim holds (one parking the same rows, having
        -- walked the same range) is skipped, left to a later claim. Waiting would tie this claim
        -- to the other's transaction; when that one's COMMIT is held up (a stalled connection or
        -- proxy), this claim would go on past its deadline, and its relay, having given up on it,
        -- would lose the attempt it spent on its heads. The conditions are re-checked on a row's
        -- latest version: a row leased, parked or put in backoff meanwhile is not ours to park
        -- (a park must never shorten a backoff).
        select y.id from outbox y
        where y.id = any(array(
            select x.id from (
              select x.id, x.aggregate_type, x.aggregate_id, x.sequence from outbox x
              where ${pendingRow(sql)} and ${claimableNow(sql)}
                -- the walk's range of outbox_pending_idx (a row comparison: an index bound)
                and (x.available_at, x.id) <= (
                  coalesce((select e.available_at from walk_end e), 'infinity'::timestamptz),
                  coalesce((select e.id from walk_end e), 9223372036854775807))
                and x.id <> all(array(select id from heads))
              order by x.available_at, x.id
              -- bounded work per claim: the first 10,000 rows stepped over, and a head test for
              -- each (a limit on the rows parked instead would let the planner price 10,000 head
              -- tests and more, and compile the statement: see jit_above_cost above). A parameter,
              -- unlike the settings above: a generic plan prices it as a tenth of the range, well
              -- below a custom plan's 10,000 head tests, so Postgres keeps the generic plan even
              -- after new statistics raise the claim's estimate (priced equal, it went back to
              -- planning every claim for thousands of calls: the custom plans' running average
              -- stays below the new generic cost)
              limit ${PARK_SCAN_LIMIT}
            ) x
            -- beyond the aggregate's head and the group claimed with it, or, when the lowest row
            -- is a dead letter that blocks its aggregate (\`block\`), anywhere behind it: nothing
            -- there can be claimed until an operator replays it (its successors are then claimed
            -- whatever their available_at) or discards it (the next row then waits out its park)
            where x.sequence > (
              select p.sequence + case when p.dead_lettered_at is null then ${perAggregateLimit} else 0 end
              from outbox p
              where p.aggregate_type = x.aggregate_type and p.aggregate_id = x.aggregate_id
                and ${holdsBackAggregate(sql, block)}
              order by p.sequence
              limit 1
            )
          ))
          -- never a row this claim takes: a successor's sequence may pass head + perAggregateLimit
          -- when published rows sit between unfinished ones (a dead letter replayed after later
          -- events went out), and a row updated twice by one statement would keep one update
          -- only, whichever CTE Postgres happened to run last
          and y.id <> all(array(select id from candidates))
          and ${pendingRowById(sql)} and ${claimableNow(sql)}
        for no key update skip locked
      ))
    ),
    -- The candidates were chosen from this statement's snapshot: another claim may hold them
    -- (not committed yet) or have leased them since (committed after the snapshot). Lock them, and
    -- a row whose latest version is leased or settled is re-checked out (FOR UPDATE re-evaluates
    -- these conditions on the latest version); a row another claim has locked is skipped.
    locked as materialized (
      select l.id from outbox l
      where l.id = any(array(select id from candidates))
        and ${pendingRowById(sql)}
        and (l.lease_expires_at is null or l.lease_expires_at <= now())
      for update skip locked
    ),
    -- Each head's successors are the longest run of its candidates, in sequence order, that this
    -- claim locked: taking a row past one it could not lock would send it before that one.
    -- (A running bool_and over each head's candidates in sequence order, one pass. The test is a
    -- hashed subplan, not a join: both CTEs are estimated at one row, and a join was planned as a
    -- nested loop comparing every candidate with every locked row, 300 × 300 in a claim of 100
    -- aggregates of 4 events.)
    successors as (
      select r.id from (
        select c.id,
               bool_and(c.id in (select k.id from locked k)) over (partition by c.head_id order by c.sequence) as run
        from candidates c
      ) r
      where r.run
    ),
    claimed as (
      select id from heads union all select id from successors
    )
    update outbox o
    set lease_token = ${options.leaseToken}::uuid,
        lease_expires_at = now() + pg_catalog.make_interval(secs => ${options.leaseSeconds}),
        -- only the head starts its publication now; a successor's attempt is spent when its round
        -- starts (startRound), so a relay that dies while sending the head costs them nothing
        attempts = o.attempts + case when o.id = any(array(select id from heads)) then 1 else 0 end
    where o.id = any(array(select id from claimed))
      -- every claimed row is locked by this statement; if its latest version is newer than the
      -- snapshot, these are re-evaluated on it, so a row leased meanwhile is never taken over
      and ${pendingRowById(sql)}
      and (o.lease_expires_at is null or o.lease_expires_at <= now())
    returning o.id, o.event_id, o.aggregate_type, o.aggregate_id, o.sequence, o.type_sequence, o.event_type, o.source,
              o.payload::text as payload, o.trace_header, o.created_at, o.attempts,
              o.id = any(array(select id from heads)) as is_head
  `;
}
