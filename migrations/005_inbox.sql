-- Up Migration
-- The inbox: what each consumer has processed, for idempotent consumption on the other side of
-- the bus. One event is handled independently by each consumer, so the key is per consumer.
create table inbox_message (
  consumer       text        not null,
  -- metadata.eventId by default; a business identity when the consumer keys on one
  message_key    text        not null,
  aggregate_type text,
  aggregate_id   text,
  sequence       bigint,
  -- 'processed', or 'skipped' (an order-aware consumer acknowledged it without running the handler)
  outcome        text        not null default 'processed',
  processed_at   timestamptz not null default now(),
  primary key (consumer, message_key)
);
create index inbox_message_processed_at_idx on inbox_message (processed_at);

-- Order-aware consumers: the last sequence applied per consumer and aggregate.
create table inbox_aggregate (
  consumer       text        not null,
  aggregate_type text        not null,
  aggregate_id   text        not null,
  last_sequence  bigint      not null,
  updated_at     timestamptz not null default now(),
  primary key (consumer, aggregate_type, aggregate_id)
);

-- wait-for-gap: when an event that arrived ahead of a gap was first seen, to bound the wait.
create table inbox_gap (
  consumer      text        not null,
  message_key   text        not null,
  first_seen_at timestamptz not null default now(),
  primary key (consumer, message_key)
);
