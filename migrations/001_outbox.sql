-- Up Migration
-- The outbox: one row per event, written by producers inside their business transaction and
-- relayed to EventBridge. State is tracked per row (never with a "highest id seen" cursor: ids are
-- assigned at insert, not at commit, so a cursor would skip rows that commit late).
create table outbox (
  id               bigint generated always as identity primary key,
  event_id         uuid        not null default gen_random_uuid() unique,
  aggregate_type   text        not null,
  aggregate_id     text        not null,
  -- 1, 2, 3… per (aggregate_type, aggregate_id), assigned in commit order under the lock on
  -- outbox_aggregate (see below).
  sequence         bigint      not null,
  event_type       text        not null,
  source           text        not null,
  payload          jsonb       not null,
  trace_header     text,
  idempotency_key  text        unique,
  created_at       timestamptz not null default now(),
  -- Not before this time: backoff after a retryable failure.
  available_at     timestamptz not null default now(),
  published_at     timestamptz,
  -- Incremented when a relay claims the row, so a row that crashes the relay still burns attempts.
  attempts         integer     not null default 0,
  lease_token      uuid,
  lease_expires_at timestamptz,
  last_error       text,
  dead_lettered_at timestamptz,
  constraint outbox_aggregate_sequence_key unique (aggregate_type, aggregate_id, sequence),
  constraint outbox_attempts_nonnegative check (attempts >= 0)
);

-- Serves the claim: only rows still to publish, oldest first. Published and dead-lettered rows
-- leave the index, so the claim does not slow down as the table fills with history.
create index outbox_pending_idx on outbox (available_at, id)
  where published_at is null and dead_lettered_at is null;

-- Serves "is there an earlier unfinished event of this aggregate?" during the ordered claim.
create index outbox_unfinished_by_aggregate_idx on outbox (aggregate_type, aggregate_id, sequence)
  where published_at is null;

-- Per-aggregate sequence counter. A producer bumps it with INSERT … ON CONFLICT DO UPDATE, which
-- holds the row lock until its transaction ends, so two producers of one aggregate are serialised
-- and sequences follow commit order (ids from the identity column do not).
create table outbox_aggregate (
  aggregate_type text   not null,
  aggregate_id   text   not null,
  last_sequence  bigint not null,
  primary key (aggregate_type, aggregate_id)
);
