-- Up Migration
-- The single-event enqueue with fewer statements (issue 20; figures in
-- docs/performance.md#what-the-outbox-costs-your-database, and `npm run bench -- --only db-cost`).
-- Migration 011's outbox_enqueue ran three statements for an aggregate seen before: bump the
-- counter, insert the row, and RETURN QUERY for the result. Each is an executor start and finish
-- inside PL/pgSQL; the counter and the row are now one statement, and the result is returned from
-- the OUT parameters. Same locks (the counter row, until the caller's transaction ends), same
-- numbering (sequence, typeSequence), same checks and errors: only the part after the checks
-- changes.

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
  payload_text := outbox_enqueue.payload::text;
  -- Sufficient conditions for outbox_enqueue_check to pass, cheap to test: a text field no longer
  -- in UTF-8 bytes than its limit in UTF-16 code units (a code unit is at least one byte) and
  -- starting with a printable ASCII character (so not all white space); a JSON object payload with
  -- no run of 19 digits in its text (jsonb prints numbers in full, and every number of at most 18
  -- integer digits is inside int64) and shorter than the 2,002 characters that 1,001 levels of
  -- nesting need; the entry's upper bound (as outbox_enqueue_check counts it) within the limit.
  -- When any fails, the checker decides, and names the field.
  if not coalesce(
       octet_length(outbox_enqueue.event_type) <= 128 and ascii(outbox_enqueue.event_type) between 33 and 126
       and octet_length(outbox_enqueue.source) <= 256 and ascii(outbox_enqueue.source) between 33 and 126
       and lower(outbox_enqueue.source) not like 'aws.%'
       and octet_length(outbox_enqueue.aggregate_type) <= 512 and ascii(outbox_enqueue.aggregate_type) between 33 and 126
       and octet_length(outbox_enqueue.aggregate_id) <= 512 and ascii(outbox_enqueue.aggregate_id) between 33 and 126
       and (outbox_enqueue.trace_header is null
            or (octet_length(outbox_enqueue.trace_header) <= 500 and ascii(outbox_enqueue.trace_header) between 33 and 126))
       and jsonb_typeof(outbox_enqueue.payload) = 'object'
       and octet_length(payload_text) < 2002
       and payload_text !~ '[0-9]{19}'
       and 14 + octet_length(outbox_enqueue.source) + octet_length(outbox_enqueue.event_type)
           + octet_length(outbox_enqueue.aggregate_type) * 6 + octet_length(outbox_enqueue.aggregate_id) * 6 + 250
           + octet_length(payload_text) <= outbox_enqueue.max_entry_bytes,
       false) then
    perform outbox_enqueue_check(outbox_enqueue.event_type, outbox_enqueue.source,
      outbox_enqueue.aggregate_type, outbox_enqueue.aggregate_id, outbox_enqueue.payload, null,
      outbox_enqueue.trace_header, outbox_enqueue.max_entry_bytes, null);
  end if;

  -- Lock 2 of migration 007: the counter row, held until the caller's transaction ends, so that
  -- sequences follow commit order. typeSequence as migration 010 numbers it. For an aggregate seen
  -- before (most enqueues), one statement bumps the counter and inserts the row: the UPDATE in a
  -- data-modifying CTE runs to completion (and takes the row lock) before the INSERT reads it.
  with bumped as (
    update outbox_aggregate as a
    set last_sequence = a.last_sequence + 1,
        type_counts = coalesce(a.type_counts, '{}'::jsonb) || jsonb_build_object(
          outbox_enqueue.event_type, coalesce((a.type_counts ->> outbox_enqueue.event_type)::bigint, 0) + 1)
    where a.aggregate_type = outbox_enqueue.aggregate_type and a.aggregate_id = outbox_enqueue.aggregate_id
    returning a.last_sequence, (a.type_counts ->> outbox_enqueue.event_type)::bigint as type_sequence
  )
  insert into outbox as o (event_id, aggregate_type, aggregate_id, sequence, type_sequence, event_type,
                           source, payload, trace_header)
  select gen_random_uuid(), outbox_enqueue.aggregate_type, outbox_enqueue.aggregate_id, b.last_sequence,
         b.type_sequence, outbox_enqueue.event_type, outbox_enqueue.source, outbox_enqueue.payload,
         outbox_enqueue.trace_header
  from bumped b
  returning o.event_id, o.sequence into new_id, new_sequence;

  if not found then
    -- A new aggregate (or one whose counter row another producer is inserting right now: ON
    -- CONFLICT then waits for it and bumps that row).
    insert into outbox_aggregate as a (aggregate_type, aggregate_id, last_sequence, type_counts)
    values (outbox_enqueue.aggregate_type, outbox_enqueue.aggregate_id, 1,
            jsonb_build_object(outbox_enqueue.event_type, 1))
    on conflict on constraint outbox_aggregate_pkey do update
      set last_sequence = a.last_sequence + 1,
          type_counts = coalesce(a.type_counts, '{}'::jsonb) || jsonb_build_object(
            outbox_enqueue.event_type, coalesce((a.type_counts ->> outbox_enqueue.event_type)::bigint, 0) + 1)
    returning a.last_sequence, (a.type_counts ->> outbox_enqueue.event_type)::bigint
    into new_sequence, new_type_sequence;
    new_id := gen_random_uuid();
    insert into outbox as o (event_id, aggregate_type, aggregate_id, sequence, type_sequence, event_type,
                             source, payload, trace_header)
    values (new_id, outbox_enqueue.aggregate_type, outbox_enqueue.aggregate_id, new_sequence,
            new_type_sequence, outbox_enqueue.event_type, outbox_enqueue.source, outbox_enqueue.payload,
            outbox_enqueue.trace_header);
  end if;

  -- The result row from the OUT parameters: RETURN QUERY would run a query (and fill a
  -- tuplestore) for three values already at hand.
  outbox_enqueue.event_id := new_id;
  outbox_enqueue.sequence := new_sequence;
  outbox_enqueue.duplicate := false;
  return next;
end
$fn$;


-- CREATE OR REPLACE resets the function's attributes: owner's rights and a fixed search_path, as
-- migration 009 set them.
do $do$
begin
  execute format('alter function outbox_enqueue(text, text, text, text, jsonb, text, text, integer) '
                 'security definer set search_path = pg_catalog, %I, pg_temp', current_schema());
end
$do$;
