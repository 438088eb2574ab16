-- Up Migration
-- A failure trace (`inbox_failed`, migration 019) goes when its event is recorded, whichever
-- release records it (issue 45). This release deletes an event's trace in the statement that
-- records the event (shared/consumer/sql/record-message.ts); a consumer of the previous release,
-- running beside it during a deploy or after a rollback, knows no traces: an event that failed on
-- this release and was applied by a retry on the previous one kept its trace, counted by the
-- monitor (InboxFailedCount) and listed by `outbox inbox failed list` as if never applied
-- (test/versions/mixed-consumers.test.ts). The trigger deletes it in the recording transaction, so
-- it goes if and only if that transaction commits. It runs as its owner (security definer): a
-- consumer's role has no DELETE since migration 026, and deletes only the traces of the record it
-- inserted, whose consumer the table's policy already checked (a role can insert only its own
-- consumer's records). The table is named through the trigger's own schema (TG_TABLE_SCHEMA) and
-- nothing is looked up through the caller's search_path. To contract once no supported release
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
