-- Up Migration
-- Dead-letter operations: a discarded dead letter is kept for audit but settled (it never
-- publishes and, under the `block` policy, no longer holds back its aggregate).
alter table outbox add column discarded_at timestamptz;

-- Dead letters are few; this keeps listing and counting them off the big table.
create index outbox_dead_lettered_idx on outbox (dead_lettered_at, id)
  where dead_lettered_at is not null;
