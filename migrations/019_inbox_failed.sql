-- Up Migration
-- The inbox's failed events (issue 33): a durable trace of every consumer invocation that did not
-- commit, written outside its rolled-back transaction before the failure leaves the inbox, so that
-- a middleware around it that turns the failure into a success (middy's `onError` returning a
-- value, `timeoutEarlyResponse`) cannot acknowledge an event without a trace. Under a wrapper that
-- passes an AbortSignal (middy), the row is written before the transaction begins, as an attempt
-- not yet finished, and removed by that transaction's first statement if it commits: a wrapper
-- that answers at once after aborting finds the row already durable.
--
-- One row per consumer and event (metadata.eventId), removed in the transaction that later
-- applies, parks or acknowledges the event; counted by the monitor once Lambda's retries are over
-- (InboxFailedCount), listed by `outbox inbox failed list`, pruned by the inbox's retention.
create table inbox_failed (
  consumer        text        not null,
  -- metadata.eventId; for an event without a readable one, 'eventbridge:' and EventBridge's id
  event_id        text        not null,
  -- the consumer's deduplication key, when the failure came after it was computed
  message_key     text,
  -- the whole EventBridge event, as the function received it: what a replay would invoke it with
  event           jsonb       not null,
  -- the error's name and message; 'InboxAttemptUnfinished' while an attempt under a
  -- signal-passing wrapper has not reported its outcome (it may never: the wrapper answered)
  error_name      text        not null,
  error_message   text        not null,
  attempts        integer     not null default 1,
  first_failed_at timestamptz not null default now(),
  last_failed_at  timestamptz not null default now(),
  primary key (consumer, event_id)
);
-- Serves the monitor's count (settled failures) and pruning, oldest first.
create index inbox_failed_last_failed_at_idx on inbox_failed (last_failed_at);
-- The traces of one business key (an inbox `key` option): removed with the event's own when a
-- delivery of that key commits (shared/consumer/sql/record-message.ts).
create index inbox_failed_message_key_idx on inbox_failed (consumer, message_key);
