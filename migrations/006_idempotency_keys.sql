-- Up Migration
-- Idempotency keys, remembered for their own retention (OUTBOX_IDEMPOTENCY_RETENTION_DAYS, 30 by
-- default) instead of only as long as their event's outbox row exists: pruning a published row
-- after 7 days must not let the same key enqueue a second event on day 8.
--
-- A key's row is written in the same transaction as its event, and carries what a duplicate
-- enqueue returns (the first event's id, aggregate and sequence), so it answers on its own after
-- the outbox row is gone. The monitor deletes a key only when it is older than its retention *and*
-- its event has left the outbox, so the window is never shorter than the event's own lifetime and
-- the unique constraint on outbox.idempotency_key can never be hit by a key that was forgotten.
create table outbox_idempotency_key (
  idempotency_key text        primary key,
  event_id        uuid        not null,
  aggregate_type  text        not null,
  aggregate_id    text        not null,
  sequence        bigint      not null,
  created_at      timestamptz not null default now()
);

-- Serves pruning, oldest first.
create index outbox_idempotency_key_created_at_idx on outbox_idempotency_key (created_at);

-- Keys of the events still in the outbox keep working across the upgrade.
insert into outbox_idempotency_key (idempotency_key, event_id, aggregate_type, aggregate_id, sequence, created_at)
select idempotency_key, event_id, aggregate_type, aggregate_id, sequence, created_at
from outbox
where idempotency_key is not null;
