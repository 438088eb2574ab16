-- Up Migration
-- A failure trace (`inbox_failed`, migration 019) goes when its event is recorded, whichever
-- release records it (issue 45). This release deletes an event's trace in the statement that
-- records the event (shared/consumer/sql/record-message.ts); a consumer of the previous release,
-- running beside it during a deploy or after a rollback, knows no traces: an event that failed on
-- this release and was applied by a retry on the previous one kept its trace, counted by the
-- monitor (InboxFailedCount) and listed by `outbox inbox failed list` as if never applied
-- (test/versions/mixed-consumers.test.ts). The trigger deletes it in the recording transaction, so
-- it goes if and only if that transaction commits. It runs with its owner's rights (SECURITY
-- DEFINER): an inbox role holds no DELETE (migration 026: it would let the role lock the table
-- against every other consumer). It deletes only the traces of the consumer of the row just
-- inserted, which the inserting role's policy allowed (row-level security checks a new row before
-- the insert), and a trigger function cannot be called otherwise. The table is named through the
-- trigger's own schema (TG_TABLE_SCHEMA) and nothing is looked up through the caller's search_path. To contract once no supported release
-- predates migration 019 (CONTRIBUTING.md#migrations).
create function inbox_message_clears_trace() returns trigger
language plpgsql security definer set search_path = pg_catalog, pg_temp as $fn$
begin
  execute format('delete from %I.inbox_failed where consumer = $1 and (event_id = $2 or message_key = $3)',
                 TG_TABLE_SCHEMA)
    using new.consumer, new.event_id, new.message_key;
  return null;
end
$fn$;

create trigger inbox_message_clears_trace after insert on inbox_message
  for each row execute function inbox_message_clears_trace();
