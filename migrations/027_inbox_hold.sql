-- Up Migration
-- The inbox's bounded handler failures (issue 46, item 2): a Custom Event Bus FIFO subscriber's
-- failed call holds up every group of the subscriber, and some failures are retried without limit.
-- An inbox with `parkAfterAttempts` turns a handler that keeps failing into a recorded outcome: the
-- event is parked after that many failed handler calls and acknowledged, and the later events of
-- its aggregate are parked behind it, in order, until an operator replays them
-- (`outbox inbox parked replay`), so that the subscriber's other aggregates keep moving.
--
-- Expand only: two nullable or defaulted columns and a partial index over no row yet. The previous
-- release neither reads nor writes them.

-- Failed handler calls of the event, apart from `attempts`: a wait-for-gap retry (InboxGapError,
-- the event waits for a missing earlier one) is an attempt but no handler failure, and must not
-- bring the event nearer to being parked.
alter table inbox_failed add column handler_failures integer not null default 0;

-- True on a parked record that holds its aggregate: the event parked after `parkAfterAttempts`
-- failed handler calls, and the later events of its aggregate parked behind it. Cleared when the
-- record is replayed.
alter table inbox_message add column holds_chain boolean;

-- The held events of an aggregate, lowest sequence first: what a later event of the aggregate looks
-- for before it is decided (one probe of an index that holds only the held records).
create index inbox_message_held_idx on inbox_message (consumer, aggregate_type, aggregate_id, sequence)
  where holds_chain;
