-- Up Migration
-- Issue 31: nothing an enqueue calls can be an object a caller created, the roles work with the
-- outbox in any schema, and occurredAt never goes back within an aggregate.
--
-- 1. outbox_enqueue and outbox_enqueue_many run as their owner (migration 009). Their search_path
--    named the outbox's schema, which a producer may be able to create objects in (`public`), so a
--    planted overload that matched a call better (an untyped literal, a polymorphic parameter, a
--    built-in called with exact types) ran as the owner. Now both run with
--    `search_path = pg_catalog, pg_temp` (functions are never looked up in pg_temp); every outbox
--    object they and their helpers use is named with its schema, and every call of an outbox
--    function passes exactly its parameters' types, which a plant cannot take (same name, same
--    types, same schema). outbox_enqueue_check_array(text, anyarray) becomes
--    outbox_enqueue_check_array(text, integer, integer): an exact overload beats a polymorphic one.
--    The bodies below are written with `@extschema@` for the outbox's schema (as PostgreSQL's
--    extension scripts are) and created with it substituted. test/producer/enqueue-definer.test.ts plants
--    the overloads.
-- 2. occurredAt (created_at, EventBridge's Time) was the producer transaction's start (now()), so
--    within an aggregate sequence 2 could carry an earlier time than sequence 1. An enqueue now
--    stamps clock_timestamp() once it holds its aggregate's counter row, which the previous
--    sequence's transaction held until it committed: per aggregate, occurredAt never decreases as
--    sequence grows (the events of one call share theirs).
-- 3. outbox_ensure_role granted USAGE on schema public; it now grants it on the outbox's schema.
--
-- Bodies are those of migrations 014 and 015 but for the qualification, the typed calls and
-- created_at.

drop function outbox_enqueue_check_array(text, anyarray);

do $do$
begin
  execute replace($sql$
create function @extschema@.outbox_enqueue_check_array(name text, dims integer, lower_bound integer)
returns void language plpgsql immutable as $fn$
begin
  -- An empty array has no dimensions (dims is null): it passes, as a null array does.
  if dims is not null and (dims <> 1 or lower_bound <> 1) then
    perform @extschema@.outbox_enqueue_reject(name,
      'must be a one-dimensional array starting at index 1'::text, null::integer);
  end if;
end
$fn$;

create or replace function @extschema@.outbox_enqueue_check(
  event_type text, source text, aggregate_type text, aggregate_id text, payload jsonb,
  idempotency_key text, trace_header text, max_entry_bytes integer, event_index integer)
returns void language plpgsql stable as $fn$
declare
  f record;
  upper_bound bigint;
  metadata_bytes bigint;
begin
  for f in
    select * from (values
      ('event_type'::text, event_type, 128, true),
      ('source', source, 256, true),
      ('aggregate_type', aggregate_type, 512, true),
      ('aggregate_id', aggregate_id, 512, true),
      ('idempotency_key', idempotency_key, 512, false),
      ('trace_header', trace_header, 500, false)
    ) as v(name, value, max_length, required)
  loop
    if f.value is null then
      if f.required then
        perform @extschema@.outbox_enqueue_reject(f.name, 'is required'::text, event_index);
      end if;
    elsif f.value ~ '^[[:space:]]*$' then
      perform @extschema@.outbox_enqueue_reject(f.name, 'must not be empty'::text, event_index);
    elsif @extschema@.outbox_utf16_length(f.value) > f.max_length then
      perform @extschema@.outbox_enqueue_reject(f.name,
        format('must be at most %s characters (got %s)', f.max_length, @extschema@.outbox_utf16_length(f.value)),
        event_index);
    end if;
  end loop;
  if lower(source) like 'aws.%' then
    perform @extschema@.outbox_enqueue_reject('source'::text,
      'must not start with "aws." (reserved for AWS services)'::text, event_index);
  end if;
  if payload is null then
    perform @extschema@.outbox_enqueue_reject('payload'::text, 'is required'::text, event_index);
  elsif jsonb_typeof(payload) <> 'object' then
    perform @extschema@.outbox_enqueue_reject('payload'::text, format(
      'must be a JSON object (got %s; EventBridge requires Detail to be an object)', jsonb_typeof(payload)),
      event_index);
  end if;
  if jsonb_path_exists(payload,
       'strict $.** ? (@.type() == "number" && (@ >= 9223372036854775808 || @ < -9223372036854775808))') then
    perform @extschema@.outbox_enqueue_reject('payload'::text,
      'holds a number outside the int64 range EventBridge accepts; send it as a string'::text, event_index);
  end if;
  if jsonb_path_exists(payload, 'strict $.**{1001}') then
    perform @extschema@.outbox_enqueue_reject('payload'::text, 'nests deeper than 1000 levels'::text, event_index);
  end if;
  metadata_bytes := octet_length(format(
    '{"metadata":{"eventId":"00000000-0000-0000-0000-000000000000","aggregateType":%s,"aggregateId":%s,"sequence":9223372036854775807,"typeSequence":9223372036854775807,"occurredAt":"2000-01-01T00:00:00.000Z"},"data":}',
    to_json(aggregate_type)::text, to_json(aggregate_id)::text));
  upper_bound := 14 + octet_length(source) + octet_length(event_type) + metadata_bytes + octet_length(payload::text);
  if upper_bound > max_entry_bytes then
    upper_bound := upper_bound - octet_length(payload::text) + @extschema@.outbox_json_bytes(payload);
    if upper_bound > max_entry_bytes then
      perform @extschema@.outbox_enqueue_reject('payload'::text, format(
        'makes the EventBridge entry %s bytes, over the %s-byte limit', upper_bound, max_entry_bytes), event_index);
    end if;
  end if;
end
$fn$;

create or replace function @extschema@.outbox_enqueue_insert(
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
    from input i join @extschema@.outbox_idempotency_key k on k.idempotency_key = i.idempotency_key
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
    insert into @extschema@.outbox_aggregate as a (aggregate_type, aggregate_id, last_sequence, type_counts)
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
    -- occurred_at: read once this aggregate's counter row is ours (item 2 of the header).
    returning a.aggregate_type, a.aggregate_id, a.last_sequence + a.sequence_offset as last_sequence, a.type_counts,
              clock_timestamp() as occurred_at
  ),
  numbered as (
    select f.*, gen_random_uuid() as event_id, b.occurred_at,
           b.last_sequence
             - count(*) over (partition by f.aggregate_type, f.aggregate_id)
             + row_number() over (partition by f.aggregate_type, f.aggregate_id order by f.ord) as sequence,
           (b.type_counts ->> f.event_type)::bigint
             - count(*) over (partition by f.aggregate_type, f.aggregate_id, f.event_type)
             + row_number() over (partition by f.aggregate_type, f.aggregate_id, f.event_type order by f.ord) as type_sequence
    from fresh f join bumped b using (aggregate_type, aggregate_id)
  ),
  inserted as (
    insert into @extschema@.outbox (event_id, aggregate_type, aggregate_id, sequence, type_sequence, event_type, source,
                                    payload, trace_header, idempotency_key, created_at)
    select event_id, aggregate_type, aggregate_id, sequence, type_sequence, event_type, source, payload, trace_header,
           idempotency_key, occurred_at
    from numbered
    order by ord
    returning id, event_id
  ),
  remembered as (
    insert into @extschema@.outbox_idempotency_key (idempotency_key, event_id, aggregate_type, aggregate_id, sequence, outbox_id)
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

create or replace function @extschema@.outbox_enqueue_many(
  event_types text[], sources text[], aggregate_types text[], aggregate_ids text[], payloads jsonb[],
  idempotency_keys text[] default null, trace_headers text[] default null, max_entry_bytes integer default 1048576)
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
        from @extschema@.outbox_enqueue(event_types[1], sources[1], aggregate_types[1], aggregate_ids[1], payloads[1],
                                        null::text, trace_headers[1], max_entry_bytes) as e;
      return;
    end if;
  end if;
  if max_entry_bytes is null or max_entry_bytes < 1 or max_entry_bytes > 1048576 then
    perform @extschema@.outbox_enqueue_reject('max_entry_bytes'::text,
      'must be a number of bytes from 1 to 1048576 (the largest entry EventBridge accepts)'::text, null::integer);
  end if;
  perform @extschema@.outbox_enqueue_check_array('event_types'::text, array_ndims(event_types), array_lower(event_types, 1));
  perform @extschema@.outbox_enqueue_check_array('sources'::text, array_ndims(sources), array_lower(sources, 1));
  perform @extschema@.outbox_enqueue_check_array('aggregate_types'::text, array_ndims(aggregate_types),
    array_lower(aggregate_types, 1));
  perform @extschema@.outbox_enqueue_check_array('aggregate_ids'::text, array_ndims(aggregate_ids),
    array_lower(aggregate_ids, 1));
  perform @extschema@.outbox_enqueue_check_array('payloads'::text, array_ndims(payloads), array_lower(payloads, 1));
  perform @extschema@.outbox_enqueue_check_array('idempotency_keys'::text, array_ndims(idempotency_keys),
    array_lower(idempotency_keys, 1));
  perform @extschema@.outbox_enqueue_check_array('trace_headers'::text, array_ndims(trace_headers),
    array_lower(trace_headers, 1));
  if coalesce(cardinality(sources), 0) <> n or coalesce(cardinality(aggregate_types), 0) <> n
     or coalesce(cardinality(aggregate_ids), 0) <> n or coalesce(cardinality(payloads), 0) <> n
     or (idempotency_keys is not null and cardinality(idempotency_keys) <> n)
     or (trace_headers is not null and cardinality(trace_headers) <> n) then
    perform @extschema@.outbox_enqueue_reject('events'::text,
      'the arrays must all have one element per event'::text, null::integer);
  end if;
  for idx in 1 .. n loop
    perform @extschema@.outbox_enqueue_check(event_types[idx], sources[idx], aggregate_types[idx], aggregate_ids[idx],
      payloads[idx], idempotency_keys[idx], trace_headers[idx], max_entry_bytes,
      (case when n > 1 then idx - 1 end)::integer);
  end loop;
  if n = 0 then return; end if;

  if idempotency_keys is null or not exists (select from unnest(idempotency_keys) as k where k is not null) then
    -- Lock 2 only (the aggregates' counter rows, in `bumped`).
    return query select * from @extschema@.outbox_enqueue_insert(
      event_types, sources, aggregate_types, aggregate_ids, payloads, null::text[], trace_headers, n);
    return;
  end if;

  -- Lock 1: the keys, in one fixed order (the seed 7301 is shared by every version of enqueue).
  -- This statement ends before the next one starts, so under READ COMMITTED the lookup in the
  -- insert runs on a new snapshot that sees a key committed by the producer we waited for.
  perform pg_advisory_xact_lock(hashtextextended(k, 7301))
  from (select k from unnest(idempotency_keys) as k where k is not null group by k order by k collate "C") as keys;
  begin
    return query select * from @extschema@.outbox_enqueue_insert(
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

create or replace function @extschema@.outbox_enqueue(
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
  -- (over 1 GB, test/relay/schema/migration-015-errors.test.ts).
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
        from @extschema@.outbox_enqueue_many(
          array[outbox_enqueue.event_type], array[outbox_enqueue.source],
          array[outbox_enqueue.aggregate_type], array[outbox_enqueue.aggregate_id],
          array[outbox_enqueue.payload], array[outbox_enqueue.idempotency_key],
          array[outbox_enqueue.trace_header], outbox_enqueue.max_entry_bytes) as m;
      return;
    end if;
    if outbox_enqueue.max_entry_bytes is null or outbox_enqueue.max_entry_bytes < 1
       or outbox_enqueue.max_entry_bytes > 1048576 then
      perform @extschema@.outbox_enqueue_reject('max_entry_bytes'::text,
        'must be a number of bytes from 1 to 1048576 (the largest entry EventBridge accepts)'::text, null::integer);
    end if;
    -- The checker decides (migration 014 first tried its cheap conditions with the entry's sum,
    -- for a max_entry_bytes below 8793; such a call now always takes the checker).
    perform @extschema@.outbox_enqueue_check(outbox_enqueue.event_type, outbox_enqueue.source,
      outbox_enqueue.aggregate_type, outbox_enqueue.aggregate_id, outbox_enqueue.payload, null::text,
      outbox_enqueue.trace_header, outbox_enqueue.max_entry_bytes, null::integer);
  end if;

  -- Lock 2 of migration 007: the counter row, held until the caller's transaction ends, so that
  -- sequences follow commit order. typeSequence as migration 010 numbers it. An UPDATE first: for
  -- an aggregate seen before (most enqueues), INSERT … ON CONFLICT would first try the insert, then
  -- lock the row (a WAL record of its own), then update it.
  update @extschema@.outbox_aggregate as a
  set type_counts = coalesce(a.type_counts, '{}'::jsonb) || jsonb_build_object(
        outbox_enqueue.event_type, coalesce((a.type_counts ->> outbox_enqueue.event_type)::bigint, 0) + 1),
      sequence_offset = a.sequence_offset + 1
  where a.aggregate_type = outbox_enqueue.aggregate_type and a.aggregate_id = outbox_enqueue.aggregate_id
  returning a.last_sequence + a.sequence_offset, (a.type_counts ->> outbox_enqueue.event_type)::bigint
  into new_sequence, new_type_sequence;
  if not found then
  insert into @extschema@.outbox_aggregate as a (aggregate_type, aggregate_id, last_sequence, type_counts)
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
  -- created_at: read now that this aggregate's counter row is ours (item 2 of the header).
  insert into @extschema@.outbox as o (event_id, aggregate_type, aggregate_id, sequence, type_sequence, event_type,
                                       source, payload, trace_header, created_at)
  values (new_id, outbox_enqueue.aggregate_type, outbox_enqueue.aggregate_id, new_sequence,
          new_type_sequence, outbox_enqueue.event_type, outbox_enqueue.source, outbox_enqueue.payload,
          outbox_enqueue.trace_header, clock_timestamp());
  -- The row through the function's OUT parameters: RETURN QUERY would start an executor for it.
  event_id := new_id;
  sequence := new_sequence;
  duplicate := false;
  return next;
end
$fn$;


alter function @extschema@.outbox_enqueue(text, text, text, text, jsonb, text, text, integer)
  security definer set search_path = pg_catalog, pg_temp;
alter function @extschema@.outbox_enqueue_many(text[], text[], text[], text[], jsonb[], text[], text[], integer)
  security definer set search_path = pg_catalog, pg_temp;
revoke execute on function @extschema@.outbox_enqueue_check_array(text, integer, integer) from public;

create or replace function @extschema@.outbox_ensure_role(role_name text, timeout_ms integer, grant_templates text[])
returns void language plpgsql as $fn$
declare t text;
begin
  if not exists (select from pg_roles where rolname = role_name) then
    execute format('create role %I login', role_name);
  end if;
  if exists (select from pg_roles where rolname = 'rds_iam') then
    execute format('grant rds_iam to %I', role_name);
  end if;
  -- The outbox's schema, found as the grant templates find its tables (the caller's search_path).
  execute format('grant usage on schema %I to %I',
    (select n.nspname from pg_class c join pg_namespace n on n.oid = c.relnamespace
     where c.oid = 'outbox'::regclass), role_name);
  execute format('alter role %I set statement_timeout = %L', role_name, timeout_ms || 'ms');
  foreach t in array grant_templates loop
    execute format(t, role_name);
  end loop;
end
$fn$;
$sql$, '@extschema@', quote_ident(current_schema()));
end
$do$;
