-- Up Migration
-- Serves parking during the ordered claim: "this aggregate's pending rows that are available now",
-- without reading the rows of its backlog that are already parked.
create index outbox_pending_by_aggregate_available_idx
  on outbox (aggregate_type, aggregate_id, available_at)
  where published_at is null and dead_lettered_at is null;
