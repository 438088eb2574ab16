-- Up Migration
-- The outbox's cost in the user's database (issue 20): less DB CPU at every enqueue through
-- outbox_enqueue, and at every insert into and update of outbox.
--
-- PL/pgSQL builds the executor state of each expression of a function once per transaction, on its
-- first evaluation; an enqueue is usually its transaction's only call, so every expression the call
-- reaches is built again at every enqueue, each function and operator in it a lookup and a step
-- list. Counted in instructions (valgrind's callgrind, postmaster and backends; 2,000 enqueues
-- of one client, prepared, PG 15; `npm run bench -- --only enqueue-instructions`), migration 014's
-- outbox_enqueue spent about 446k per enqueue against 119k for the plain design's INSERT, of
-- which about 69k went to validating the event. Two changes, behaviour unchanged:
--
-- 1. outbox_enqueue decides the common case (no idempotency key, max_entry_bytes of at least
--    8793, every cheap condition true) with two expressions (the payload's text, and one test),
--    where migration 014 evaluated four. Anything else goes, as before, to a key's path or the
--    max_entry_bytes refusal, and then to the checker, outbox_enqueue_check (014 first tried its
--    cheap conditions with the entry's sum, which spared the checker only a valid event under a
--    max_entry_bytes below 8793). RETURN NEXT through the OUT parameters replaces RETURN QUERY (a
--    query, so an executor, per call).
-- 2. The CHECK (attempts >= 0) of migration 001 is dropped. Postgres turns a table's CHECK
--    constraints into executable form again in every statement that inserts or updates a row
--    (about 13k instructions per enqueue). attempts is written only by the relay's statements,
--    which add 1 to it or take 1 from it through greatest(…, 0) (shared/relay/sql); the model-based
--    test (test/relay-model.test.ts) checks after every command that no row's attempts is below 0.
--
-- Dropping the constraint takes an ACCESS EXCLUSIVE lock on outbox until the migrations'
-- transaction commits (a catalog change, no scan), so it waits 5 s at most, as migration 013 does.
-- A call of outbox_enqueue already running when this commits finishes with migration 014's body,
-- which numbers events as this one does.
set local lock_timeout = '5s';
alter table outbox drop constraint outbox_attempts_nonnegative;

-- Migration 014's function but for the order of its tests and its RETURN.
create or replace function outbox_enqueue(
  event_type text, source text, aggregate_type text, aggregate_id text, payload jsonb,
  idempotency_key text default null, trace_header text default null,
  max_entry_bytes integer default 1048576)
returns table (event_id uuid, sequence bigint, duplicate boolean)
language plpgsql volatile as $fn$
declare
  payload_text text;
  new_id uuid;
  new_sequence bigint;
  new_type_sequence bigint;
begin
  -- The payload's text, for the common case only: an event with a key, or a max_entry_bytes out of
  -- range, is answered first (as migration 014 did), and a payload's text can be too large to make
  -- (over 1 GB, test/migration-015-errors.test.ts).
  payload_text := case when outbox_enqueue.idempotency_key is null
                         and outbox_enqueue.max_entry_bytes between 8793 and 1048576
                       then outbox_enqueue.payload::text end;
  -- The common case, decided by one expression: no idempotency key, a max_entry_bytes of at least
  -- 8793 (up to EventBridge's 1048576), and migration 014's sufficient conditions for
  -- outbox_enqueue_check to pass (each text field no longer in UTF-8 bytes than its limit in UTF-16
  -- code units and starting with a printable ASCII character; a JSON object payload with no run of
  -- 19 digits, shorter than 2,002 characters). Those conditions bound the entry (as
  -- outbox_enqueue_check counts it) by 14 + 256 + 128 + 512 * 6 + 512 * 6 + 250 + 2001 = 8793
  -- bytes, so at such a max_entry_bytes its sum need not be computed. Anything else takes the
  -- branch below: a key's path, the max_entry_bytes refusal, else the checker.
  if not coalesce(
       outbox_enqueue.idempotency_key is null
       and outbox_enqueue.max_entry_bytes between 8793 and 1048576
       and octet_length(outbox_enqueue.event_type) <= 128 and ascii(outbox_enqueue.event_type) between 33 and 126
       and octet_length(outbox_enqueue.source) <= 256 and ascii(outbox_enqueue.source) between 33 and 126
       and lower(outbox_enqueue.source) not like 'aws.%'
       and octet_length(outbox_enqueue.aggregate_type) <= 512 and ascii(outbox_enqueue.aggregate_type) between 33 and 126
       and octet_length(outbox_enqueue.aggregate_id) <= 512 and ascii(outbox_enqueue.aggregate_id) between 33 and 126
       and (outbox_enqueue.trace_header is null
            or (octet_length(outbox_enqueue.trace_header) <= 500 and ascii(outbox_enqueue.trace_header) between 33 and 126))
       and jsonb_typeof(outbox_enqueue.payload) = 'object'
       and octet_length(payload_text) < 2002
       and payload_text !~ '[0-9]{19}',
       false) then
    if outbox_enqueue.idempotency_key is not null then
      -- Keys take the advisory lock and the duplicate lookup of the many-events path.
      return query select m.event_id, m.sequence, m.duplicate
        from outbox_enqueue_many(
          array[outbox_enqueue.event_type], array[outbox_enqueue.source],
          array[outbox_enqueue.aggregate_type], array[outbox_enqueue.aggregate_id],
          array[outbox_enqueue.payload], array[outbox_enqueue.idempotency_key],
          array[outbox_enqueue.trace_header], outbox_enqueue.max_entry_bytes) as m;
      return;
    end if;
    if outbox_enqueue.max_entry_bytes is null or outbox_enqueue.max_entry_bytes < 1
       or outbox_enqueue.max_entry_bytes > 1048576 then
      perform outbox_enqueue_reject('max_entry_bytes',
        'must be a number of bytes from 1 to 1048576 (the largest entry EventBridge accepts)', null);
    end if;
    -- The checker decides (migration 014 first tried its cheap conditions with the entry's sum,
    -- for a max_entry_bytes below 8793; such a call now always takes the checker).
    perform outbox_enqueue_check(outbox_enqueue.event_type, outbox_enqueue.source,
      outbox_enqueue.aggregate_type, outbox_enqueue.aggregate_id, outbox_enqueue.payload, null,
      outbox_enqueue.trace_header, outbox_enqueue.max_entry_bytes, null);
  end if;

  -- Lock 2 of migration 007: the counter row, held until the caller's transaction ends, so that
  -- sequences follow commit order. typeSequence as migration 010 numbers it. An UPDATE first: for
  -- an aggregate seen before (most enqueues), INSERT … ON CONFLICT would first try the insert, then
  -- lock the row (a WAL record of its own), then update it.
  update outbox_aggregate as a
  set type_counts = coalesce(a.type_counts, '{}'::jsonb) || jsonb_build_object(
        outbox_enqueue.event_type, coalesce((a.type_counts ->> outbox_enqueue.event_type)::bigint, 0) + 1),
      sequence_offset = a.sequence_offset + 1
  where a.aggregate_type = outbox_enqueue.aggregate_type and a.aggregate_id = outbox_enqueue.aggregate_id
  returning a.last_sequence + a.sequence_offset, (a.type_counts ->> outbox_enqueue.event_type)::bigint
  into new_sequence, new_type_sequence;
  if not found then
  insert into outbox_aggregate as a (aggregate_type, aggregate_id, last_sequence, type_counts)
  values (outbox_enqueue.aggregate_type, outbox_enqueue.aggregate_id, 1,
          jsonb_build_object(outbox_enqueue.event_type, 1))
  on conflict on constraint outbox_aggregate_pkey do update
    set type_counts = coalesce(a.type_counts, '{}'::jsonb) || jsonb_build_object(
          outbox_enqueue.event_type, coalesce((a.type_counts ->> outbox_enqueue.event_type)::bigint, 0) + 1),
        sequence_offset = a.sequence_offset + 1
  returning a.last_sequence + a.sequence_offset, (a.type_counts ->> outbox_enqueue.event_type)::bigint
  into new_sequence, new_type_sequence;
  end if;

  new_id := gen_random_uuid();
  insert into outbox as o (event_id, aggregate_type, aggregate_id, sequence, type_sequence, event_type,
                           source, payload, trace_header)
  values (new_id, outbox_enqueue.aggregate_type, outbox_enqueue.aggregate_id, new_sequence,
          new_type_sequence, outbox_enqueue.event_type, outbox_enqueue.source, outbox_enqueue.payload,
          outbox_enqueue.trace_header);
  -- The row through the function's OUT parameters: RETURN QUERY would start an executor for it.
  event_id := new_id;
  sequence := new_sequence;
  duplicate := false;
  return next;
end
$fn$;

do $do$
begin
  execute format('alter function outbox_enqueue(text, text, text, text, jsonb, text, text, integer) '
                 'security definer set search_path = pg_catalog, %I, pg_temp', current_schema());
end
$do$;
