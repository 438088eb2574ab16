-- Up Migration
-- The outbox's cost in the user's database (issue 20): about 85 B less WAL at every enqueue.
--
-- An enqueue updates its aggregate's counter row (outbox_aggregate: aggregate_type, aggregate_id,
-- last_sequence, type_counts), a HOT update. Postgres logs such an update as the bytes between the
-- first and the last that changed (the common prefix and suffix with the old row version are left
-- out). Both last_sequence and one count inside type_counts change, and last_sequence comes first,
-- so every update logged the whole of type_counts up to that count: its header, its entries, every
-- event type's name (`npm run bench -- --only enqueue-anatomy`: the per-type counts added 97 B of
-- WAL per enqueue).
--
-- So the number that changes at every enqueue moves to the end of the row: a new column,
-- sequence_offset, and an aggregate's last sequence is last_sequence + sequence_offset. From now
-- on the functions add to sequence_offset and leave last_sequence as it is, and an update logs only
-- the changed count and what follows it. ADD COLUMN … NOT NULL DEFAULT 0 is a catalog change (the
-- default is kept in the catalog for the rows written before it), not a rewrite of the table or an
-- update of its rows; it takes an ACCESS EXCLUSIVE lock on outbox_aggregate for that moment, so it
-- waits 5 s at most, as migration 013 does. A row inserted from now on starts at last_sequence (the
-- events of its first call) and sequence_offset 0. Whoever reads an aggregate's last sequence adds
-- the two (shared/operations/sql/conditions.ts).
--
-- The function bodies are those of migration 011 but for the counter's update, so that old and
-- new versions can be read side by side.
set local lock_timeout = '5s';
alter table outbox_aggregate add column sequence_offset bigint not null default 0;

comment on column outbox_aggregate.sequence_offset is
  'Sequences handed out since last_sequence was written: the aggregate''s last sequence is last_sequence + sequence_offset (migration 014).';

-- A call of the old functions that was already running when this migration committed (it waited
-- for the ALTER's lock) goes on with the old code, which bumps and returns last_sequence alone. If
-- a call of the new code has added to sequence_offset first, that would hand out a sequence given
-- before and skip one (test/migration-014-in-flight.test.ts). This trigger refuses such an update
-- with a serialization failure: the producer retries its transaction, and the retry runs the new
-- code. The new code never sets last_sequence, so the trigger never fires for it; an AFTER trigger
-- (a BEFORE row trigger would lock each counter row first, a WAL record per enqueue) with a
-- column list and a WHEN costs an enqueue no write. An old call that finds sequence_offset still 0
-- numbers correctly and goes through.
create function outbox_aggregate_refuse_stale_bump() returns trigger
language plpgsql as $fn$
begin
  raise exception using
    errcode = '40001',
    message = 'outbox_enqueue: the outbox schema was upgraded (migration 014) while this call was running',
    hint = 'Retry the whole transaction: the retry runs the upgraded functions.';
end
$fn$;
revoke execute on function outbox_aggregate_refuse_stale_bump() from public;

create trigger outbox_aggregate_refuse_stale_bump
  after update of last_sequence on outbox_aggregate
  for each row when (old.sequence_offset <> 0)
  execute function outbox_aggregate_refuse_stale_bump();

-- The insert of outbox_enqueue_many, as migration 011 left it, but for the counter: it adds to
-- sequence_offset and returns last_sequence + sequence_offset.
create or replace function outbox_enqueue_insert(
  event_types text[], sources text[], aggregate_types text[], aggregate_ids text[], payloads jsonb[],
  idempotency_keys text[], trace_headers text[], n integer)
returns table (ord integer, event_id uuid, aggregate_type text, aggregate_id text, sequence bigint, duplicate boolean)
language sql volatile as $fn$
  with input as (
    select t.ord::integer as ord, t.event_type, t.source, t.aggregate_type, t.aggregate_id,
           t.payload, t.idempotency_key, t.trace_header
    from unnest(event_types, sources, aggregate_types, aggregate_ids, payloads,
                coalesce(idempotency_keys, array_fill(null::text, array[n])),
                coalesce(trace_headers, array_fill(null::text, array[n])))
         with ordinality as t(event_type, source, aggregate_type, aggregate_id, payload, idempotency_key, trace_header, ord)
  ),
  known as (
    select i.ord, k.event_id, k.aggregate_type, k.aggregate_id, k.sequence
    from input i join outbox_idempotency_key k on k.idempotency_key = i.idempotency_key
  ),
  fresh as (
    select i.* from input i
    where not exists (select from known k where k.ord = i.ord)
      and (i.idempotency_key is null
           or i.ord = (select min(j.ord) from input j where j.idempotency_key = i.idempotency_key))
  ),
  per_type as (
    select f.aggregate_type, f.aggregate_id, f.event_type, count(*) as n
    from fresh f group by f.aggregate_type, f.aggregate_id, f.event_type
  ),
  bumped as (
    insert into outbox_aggregate as a (aggregate_type, aggregate_id, last_sequence, type_counts)
    select p.aggregate_type, p.aggregate_id, sum(p.n)::bigint, jsonb_object_agg(p.event_type, p.n)
    from per_type p
    group by p.aggregate_type, p.aggregate_id
    order by p.aggregate_type, p.aggregate_id
    on conflict (aggregate_type, aggregate_id)
      do update set
        type_counts = coalesce(a.type_counts, '{}'::jsonb) || (
          select jsonb_object_agg(c.key, coalesce((a.type_counts ->> c.key)::bigint, 0) + c.value::bigint)
          from jsonb_each_text(excluded.type_counts) as c),
        sequence_offset = a.sequence_offset + excluded.last_sequence
    returning a.aggregate_type, a.aggregate_id, a.last_sequence + a.sequence_offset as last_sequence, a.type_counts
  ),
  numbered as (
    select f.*, gen_random_uuid() as event_id,
           b.last_sequence
             - count(*) over (partition by f.aggregate_type, f.aggregate_id)
             + row_number() over (partition by f.aggregate_type, f.aggregate_id order by f.ord) as sequence,
           (b.type_counts ->> f.event_type)::bigint
             - count(*) over (partition by f.aggregate_type, f.aggregate_id, f.event_type)
             + row_number() over (partition by f.aggregate_type, f.aggregate_id, f.event_type order by f.ord) as type_sequence
    from fresh f join bumped b using (aggregate_type, aggregate_id)
  ),
  inserted as (
    insert into outbox (event_id, aggregate_type, aggregate_id, sequence, type_sequence, event_type, source, payload, trace_header, idempotency_key)
    select event_id, aggregate_type, aggregate_id, sequence, type_sequence, event_type, source, payload, trace_header, idempotency_key
    from numbered
    order by ord
    returning id, event_id
  ),
  remembered as (
    insert into outbox_idempotency_key (idempotency_key, event_id, aggregate_type, aggregate_id, sequence, outbox_id)
    select n.idempotency_key, n.event_id, n.aggregate_type, n.aggregate_id, n.sequence, r.id
    from numbered n join inserted r using (event_id) where n.idempotency_key is not null
  )
  select i.ord,
         coalesce(k.event_id, nn.event_id, r.event_id),
         coalesce(k.aggregate_type, nn.aggregate_type, r.aggregate_type),
         coalesce(k.aggregate_id, nn.aggregate_id, r.aggregate_id),
         coalesce(k.sequence, nn.sequence, r.sequence),
         nn.ord is null
  from input i
  left join known k on k.ord = i.ord
  left join numbered nn on nn.ord = i.ord
  left join numbered r on k.ord is null and nn.ord is null and r.idempotency_key = i.idempotency_key
  order by i.ord
$fn$;

-- One event (migration 011's single-event path), but for the counter: it adds to sequence_offset
-- and returns last_sequence + sequence_offset.
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
  return query select new_id, new_sequence, false;
end
$fn$;

do $do$
begin
  execute format('alter function outbox_enqueue(text, text, text, text, jsonb, text, text, integer) '
                 'security definer set search_path = pg_catalog, %I, pg_temp', current_schema());
end
$do$;
