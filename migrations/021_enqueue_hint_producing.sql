-- Up Migration
-- The hint of outbox_enqueue's validation error (22023) named the README's "Enqueue from SQL",
-- which moved to docs/producing.md (issue 36). Released migrations are never edited: this
-- redefines outbox_enqueue_reject as migration 007 left it (no later migration changed it) but
-- for the hint. CREATE OR REPLACE keeps its owner and privileges (migration 009 revoked EXECUTE
-- from PUBLIC), and it is created where 007 created it: in the outbox's schema, the first of the
-- search_path the migrations run with.
create or replace function outbox_enqueue_reject(field text, problem text, event_index integer)
returns void language plpgsql as $fn$
begin
  raise exception using
    errcode = '22023',
    message = format('outbox_enqueue: %s%s: %s',
                     case when event_index is null then '' else format('events[%s].', event_index) end,
                     field, problem),
    column = field,
    hint = 'Nothing was written. Fix the event; see docs/producing.md, "Enqueue from SQL: any driver, ORM or language".';
end
$fn$;
