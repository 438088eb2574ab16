-- Up Migration
-- The outbox's cost in the user's database (issue 20; figures in
-- docs/performance.md#what-the-outbox-costs-your-database, and `npm run bench -- --only db-cost`).
-- Same guarantees, fewer writes:
--
-- 1. Three unique indexes on the whole of outbox go (7 indexes written per enqueue become 4).
--    Every enqueue wrote an entry into each, and every mark (which cannot be a HOT update:
--    published_at is in the partial indexes' predicates) wrote one more into each:
--    - outbox_event_id_key: event ids are random uuids (gen_random_uuid), never looked up by the
--      relay; the operator commands find dead letters through outbox_dead_lettered_idx first, and
--      prune now finds a key's event by its row id, which the key row records (outbox_id).
--    - outbox_idempotency_key_key: outbox_idempotency_key's primary key is what refuses a second
--      event for a key (and what turns a concurrent key into 40001); the copy on outbox only
--      repeated it, and indexed a NULL for every event enqueued without a key.
--    - outbox_aggregate_sequence_key: the counter row's lock is what makes (aggregate, sequence)
--      unique; every lookup by aggregate is of unfinished rows, which
--      outbox_unfinished_by_aggregate_idx serves. That index is now unique, so a second row with
--      an unfinished row's (aggregate, sequence) is still refused. Published rows were unique when
--      they were unfinished: a row's aggregate and sequence never change.
-- 2. fillfactor: outbox keeps room on each page so that the claim's lease update (lease_token,
--    lease_expires_at, attempts: in no index) is a HOT update, written once in the heap and in no
--    index; the per-aggregate counter keeps room so that its update at every enqueue is HOT too.
--    Both apply to pages written from now on.
-- 3. outbox_enqueue (one event, no idempotency key) takes a path of its own: the checks as plain
--    expressions, the exact checker (outbox_enqueue_check) only when one of them fails, then two
--    statements (bump the aggregate's counter, insert the row), with PL/pgSQL's cached plans.
--    The many-events function planned its whole statement at every call. Same locks (the counter
--    row, until the caller's transaction ends), same numbering (sequence, typeSequence), same
--    errors. A call with a key goes through outbox_enqueue_many as before; a call of
--    outbox_enqueue_many with one event and no key (what enqueue() sends) takes this path.

-- Before outbox_event_id_key goes: the key rows learn their event's row id. A key whose event
-- has already left the outbox keeps NULL (prune then forgets it after its retention).
alter table outbox_idempotency_key add column outbox_id bigint;
update outbox_idempotency_key k set outbox_id = o.id from outbox o where o.event_id = k.event_id;

alter table outbox drop constraint outbox_event_id_key;
alter table outbox drop constraint outbox_idempotency_key_key;

create unique index outbox_unfinished_by_aggregate_key on outbox (aggregate_type, aggregate_id, sequence)
  where published_at is null;
drop index outbox_unfinished_by_aggregate_idx;
alter index outbox_unfinished_by_aggregate_key rename to outbox_unfinished_by_aggregate_idx;
alter table outbox drop constraint outbox_aggregate_sequence_key;

alter table outbox set (fillfactor = 50);
alter table outbox_aggregate set (fillfactor = 80);

-- The insert of outbox_enqueue_many, as migration 010 left it, but for the key row, which now
-- records its event's row id (outbox_id): prune looks the event up by it.
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
        last_sequence = a.last_sequence + excluded.last_sequence,
        type_counts = coalesce(a.type_counts, '{}'::jsonb) || (
          select jsonb_object_agg(c.key, coalesce((a.type_counts ->> c.key)::bigint, 0) + c.value::bigint)
          from jsonb_each_text(excluded.type_counts) as c)
    returning a.aggregate_type, a.aggregate_id, a.last_sequence, a.type_counts
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

-- One event, with named parameters (migration 007 describes the contract). Owner's rights and a
-- fixed search_path, as migration 009 set them.
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
  set last_sequence = a.last_sequence + 1,
      type_counts = coalesce(a.type_counts, '{}'::jsonb) || jsonb_build_object(
        outbox_enqueue.event_type, coalesce((a.type_counts ->> outbox_enqueue.event_type)::bigint, 0) + 1)
  where a.aggregate_type = outbox_enqueue.aggregate_type and a.aggregate_id = outbox_enqueue.aggregate_id
  returning a.last_sequence, (a.type_counts ->> outbox_enqueue.event_type)::bigint
  into new_sequence, new_type_sequence;
  if not found then
  insert into outbox_aggregate as a (aggregate_type, aggregate_id, last_sequence, type_counts)
  values (outbox_enqueue.aggregate_type, outbox_enqueue.aggregate_id, 1,
          jsonb_build_object(outbox_enqueue.event_type, 1))
  on conflict on constraint outbox_aggregate_pkey do update
    set last_sequence = a.last_sequence + 1,
        type_counts = coalesce(a.type_counts, '{}'::jsonb) || jsonb_build_object(
          outbox_enqueue.event_type, coalesce((a.type_counts ->> outbox_enqueue.event_type)::bigint, 0) + 1)
  returning a.last_sequence, (a.type_counts ->> outbox_enqueue.event_type)::bigint
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

-- Many events at once (migration 007), with one event without a key sent to outbox_enqueue's path:
-- that is what enqueue() in TypeScript (and the pg, Drizzle and Kysely adapters) sends for one
-- event, and the general path plans its whole statement at every call. Anything else (several
-- events, a key, an array of another shape) takes the general path as before.
create or replace function outbox_enqueue_many(
  event_types text[], sources text[], aggregate_types text[], aggregate_ids text[], payloads jsonb[],
  idempotency_keys text[] default null, trace_headers text[] default null,
  max_entry_bytes integer default 1048576)
returns table (ord integer, event_id uuid, aggregate_type text, aggregate_id text, sequence bigint, duplicate boolean)
language plpgsql volatile as $fn$
#variable_conflict use_column
declare
  n integer := coalesce(cardinality(event_types), 0);
  idx integer;
  violated text;
begin
  -- One event without a key (what enqueue() sends for a single event): the single-event path,
  -- which checks the event itself, with the same errors (no events[i] prefix for one event).
  if n = 1 and idempotency_keys is null or n = 1 and cardinality(idempotency_keys) = 1
     and array_ndims(idempotency_keys) = 1 and array_lower(idempotency_keys, 1) = 1 and idempotency_keys[1] is null then
    if coalesce(array_ndims(event_types) = 1 and array_lower(event_types, 1) = 1
         and array_ndims(sources) = 1 and array_lower(sources, 1) = 1 and cardinality(sources) = 1
         and array_ndims(aggregate_types) = 1 and array_lower(aggregate_types, 1) = 1 and cardinality(aggregate_types) = 1
         and array_ndims(aggregate_ids) = 1 and array_lower(aggregate_ids, 1) = 1 and cardinality(aggregate_ids) = 1
         and array_ndims(payloads) = 1 and array_lower(payloads, 1) = 1 and cardinality(payloads) = 1
         and (trace_headers is null or (array_ndims(trace_headers) = 1 and array_lower(trace_headers, 1) = 1
                                        and cardinality(trace_headers) = 1)),
         false) then
      return query select 1, e.event_id, aggregate_types[1], aggregate_ids[1], e.sequence, e.duplicate
        from outbox_enqueue(event_types[1], sources[1], aggregate_types[1], aggregate_ids[1], payloads[1],
                            null, trace_headers[1], max_entry_bytes) as e;
      return;
    end if;
  end if;
  if max_entry_bytes is null or max_entry_bytes < 1 or max_entry_bytes > 1048576 then
    perform outbox_enqueue_reject('max_entry_bytes',
      'must be a number of bytes from 1 to 1048576 (the largest entry EventBridge accepts)', null);
  end if;
  perform outbox_enqueue_check_array('event_types', event_types);
  perform outbox_enqueue_check_array('sources', sources);
  perform outbox_enqueue_check_array('aggregate_types', aggregate_types);
  perform outbox_enqueue_check_array('aggregate_ids', aggregate_ids);
  perform outbox_enqueue_check_array('payloads', payloads);
  perform outbox_enqueue_check_array('idempotency_keys', idempotency_keys);
  perform outbox_enqueue_check_array('trace_headers', trace_headers);
  if coalesce(cardinality(sources), 0) <> n or coalesce(cardinality(aggregate_types), 0) <> n
     or coalesce(cardinality(aggregate_ids), 0) <> n or coalesce(cardinality(payloads), 0) <> n
     or (idempotency_keys is not null and cardinality(idempotency_keys) <> n)
     or (trace_headers is not null and cardinality(trace_headers) <> n) then
    perform outbox_enqueue_reject('events', 'the arrays must all have one element per event', null);
  end if;
  for idx in 1 .. n loop
    perform outbox_enqueue_check(event_types[idx], sources[idx], aggregate_types[idx], aggregate_ids[idx],
      payloads[idx], idempotency_keys[idx], trace_headers[idx], max_entry_bytes,
      case when n > 1 then idx - 1 end);
  end loop;
  if n = 0 then return; end if;

  if idempotency_keys is null or not exists (select from unnest(idempotency_keys) as k where k is not null) then
    -- Lock 2 only (the aggregates' counter rows, in `bumped`).
    return query select * from outbox_enqueue_insert(
      event_types, sources, aggregate_types, aggregate_ids, payloads, null, trace_headers, n);
    return;
  end if;

  -- Lock 1: the keys, in one fixed order (the seed 7301 is shared by every version of enqueue).
  -- This statement ends before the next one starts, so under READ COMMITTED the lookup in the
  -- insert runs on a new snapshot that sees a key committed by the producer we waited for.
  perform pg_advisory_xact_lock(hashtextextended(k, 7301))
  from (select k from unnest(idempotency_keys) as k where k is not null group by k order by k collate "C") as keys;
  begin
    return query select * from outbox_enqueue_insert(
      event_types, sources, aggregate_types, aggregate_ids, payloads, idempotency_keys, trace_headers, n);
  exception when unique_violation then
    get stacked diagnostics violated = constraint_name;
    if violated <> 'outbox_idempotency_key_pkey' then raise; end if;
    raise exception using
      errcode = '40001',
      message = 'outbox_enqueue: idempotency_key: a key of this call was enqueued by a transaction that '
        || 'committed after this transaction''s snapshot was taken (REPEATABLE READ or SERIALIZABLE)',
      hint = 'Retry the whole transaction: the retry returns the existing event with duplicate = true.';
  end;
end
$fn$;


do $do$
begin
  execute format('alter function outbox_enqueue(text, text, text, text, jsonb, text, text, integer) '
                 'security definer set search_path = pg_catalog, %I, pg_temp', current_schema());
  execute format('alter function outbox_enqueue_many(text[], text[], text[], text[], jsonb[], text[], text[], integer) '
                 'security definer set search_path = pg_catalog, %I, pg_temp', current_schema());
end
$do$;
