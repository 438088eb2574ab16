-- Up Migration
-- The inbox's order, round 2 (issue 33; docs/inbox-order.md#order-what-a-consumer-may-rely-on):
--
-- 1. A chain is one aggregate's events across sources. The producer numbers `sequence` (and
--    `typeSequence`) per aggregate type and id in one outbox database, whatever the event's
--    source: `shop.orders` #1, `shop.crm` #2, `shop.orders` #3 is one aggregate's history. Keyed
--    per source, a wait-for-gap consumer waited at every switch between sources for a number the
--    other source had taken. From this migration the inbox keeps each chain's position in the row
--    with source '' (the rows written before migration 010 already had it); a chain's first use
--    adopts the highest position its per-source rows (migrations 010 to 017) recorded, and the
--    locking read keeps reading them, so that a consumer still running the previous version
--    during a deploy cannot move a chain backwards (shared/consumer/sql/lock-chain.ts).
-- 2. The wait-for-gap row of an event now says where the event stands: its chain and position. An
--    event whose wait is over no longer jumps ahead of another event of its chain that is waiting
--    behind the same gap: the lowest one decides the gap, the others follow it in order
--    (shared/consumer/order.ts).

comment on column inbox_aggregate.source is
  '''''  for the chain of an aggregate across sources (from migration 018, and before migration 010); a source for the per-source chains of migrations 010 to 017, read only to adopt their position';

-- NULL for the rows written before this migration (their events are then no one's lower waiter).
alter table inbox_gap
  add column aggregate_type text,
  add column aggregate_id   text,
  add column chain          text,
  add column position       bigint;

-- The events of one chain waiting behind its gap, by position: read under the chain's lock by
-- every event that is not the next one of its chain.
create index inbox_gap_chain_idx on inbox_gap (consumer, aggregate_type, aggregate_id, chain, position)
  where position is not null;
