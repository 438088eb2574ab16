-- Up Migration
-- outbox_enqueue: enqueue from any driver, ORM or language, inside the caller's own transaction.
--
--   select * from outbox_enqueue(
--     event_type => 'OrderPlaced', source => 'shop.orders',
--     aggregate_type => 'order', aggregate_id => '8842',
--     payload => '{"total": 120}'::jsonb,
--     idempotency_key => 'order-8842-placed',   -- optional
--     trace_header => null);                     -- optional
--   → (event_id uuid, sequence bigint, duplicate boolean)
--
-- It is also what the TypeScript `enqueue` / `enqueueMany` call (through outbox_enqueue_many), so
-- every producer takes the same locks in the same order and follows the same rules.
--
-- Errors:
--   22023 (invalid_parameter_value): a bad argument. The message starts with
--     "outbox_enqueue: <field>: …" (with "events[<i>].<field>" in a many-events call, i from 0),
--     and the error's COLUMN field holds the parameter name. Nothing was written; the caller's
--     transaction is aborted, as after any error.
--   40P01 (deadlock_detected): two transactions enqueued for the same aggregates (or keys) in
--     opposite orders. Retry the whole transaction.
--   40001 (serialization_failure): under REPEATABLE READ or SERIALIZABLE only, a key of the call was
--     committed by another transaction after the caller's snapshot was taken (invisible to it, so
--     its insert met the key's unique index). Retry the whole transaction: the retry returns the
--     existing event with duplicate = true. Under READ COMMITTED (the default) it cannot happen.
--
-- Lengths are counted in UTF-16 code units, as the TypeScript enqueue counts them (an emoji counts
-- 2), so the two validators agree. Array arguments must be one-dimensional from index 1 (the checks
-- read element [i], the insert unnest()), and max_entry_bytes is at most 1048576.
--
-- Locks, each held until the caller's transaction commits or rolls back:
--   1. one transaction-scoped advisory lock per idempotency key (sorted), so two producers of one
--      key are serialised *before* a sequence number is taken: the second one then sees the first
--      one's key and writes nothing, leaving no gap in the aggregate's sequence;
--   2. the row lock on each aggregate's counter row in outbox_aggregate (sorted by aggregate_type,
--      aggregate_id), so sequences follow commit order: a second producer of the same aggregate
--      waits until the first one ends.
-- Within one call the order is fixed; across calls it is the caller's. A transaction that
-- enqueues for order/1 then order/2 while another enqueues for order/2 then order/1 deadlocks, and
-- Postgres aborts one of them (40P01).

-- The compact JSON size, in UTF-8 bytes, of a jsonb value: its text form (which puts a space after
-- every ':' and ',') without the spaces outside string literals. This is what the relay sends as
-- Detail.data, up to the spelling of numbers (1.50 vs 1.5).
create function outbox_json_bytes(value jsonb) returns integer
language sql immutable strict parallel safe as $fn$
  select octet_length(t) - (length(s) - length(replace(s, ' ', '')))
  from (select value::text as t) as j,
       -- E'' spells the backslashes out, whatever the session's standard_conforming_strings.
       lateral (select regexp_replace(j.t, E'"(?:[^"\\\\]|\\\\.)*"', '', 'g') as s) as stripped
$fn$;

-- Raises the documented validation error.
create function outbox_enqueue_reject(field text, problem text, event_index integer)
returns void language plpgsql as $fn$
begin
  raise exception using
    errcode = '22023',
    message = format('outbox_enqueue: %s%s: %s',
                     case when event_index is null then '' else format('events[%s].', event_index) end,
                     field, problem),
    column = field,
    hint = 'Nothing was written. Fix the event; see the README, "Enqueue from SQL".';
end
$fn$;

-- Length in UTF-16 code units (JavaScript's String.length).
create function outbox_utf16_length(value text) returns integer
language sql immutable strict parallel safe as $fn$
  select length(value) + length(value) - length(regexp_replace(value, E'[\\U00010000-\\U0010FFFF]', '', 'g'))
$fn$;

-- Refuses an array argument that is not one-dimensional from index 1.
create function outbox_enqueue_check_array(name text, value anyarray) returns void
language plpgsql immutable as $fn$
begin
  if value is not null and cardinality(value) > 0
     and (array_ndims(value) <> 1 or array_lower(value, 1) <> 1) then
    perform outbox_enqueue_reject(name, 'must be a one-dimensional array starting at index 1', null);
  end if;
end
$fn$;

-- Checks one event as enqueue() does (as far as SQL can): required text fields and their lengths,
-- a source outside "aws.", a JSON object payload without numbers EventBridge refuses, and the size
-- of the entry EventBridge will count. `event_index` is the event's index in a many-events call.
create function outbox_enqueue_check(
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
      ('event_type', event_type, 128, true),
      ('source', source, 256, true),
      ('aggregate_type', aggregate_type, 512, true),
      ('aggregate_id', aggregate_id, 512, true),
      ('idempotency_key', idempotency_key, 512, false),
      ('trace_header', trace_header, 500, false)
    ) as v(name, value, max_length, required)
  loop
    if f.value is null then
      if f.required then perform outbox_enqueue_reject(f.name, 'is required', event_index); end if;
    elsif f.value ~ '^[[:space:]]*$' then
      perform outbox_enqueue_reject(f.name, 'must not be empty', event_index);
    elsif outbox_utf16_length(f.value) > f.max_length then
      perform outbox_enqueue_reject(f.name,
        format('must be at most %s characters (got %s)', f.max_length, outbox_utf16_length(f.value)), event_index);
    end if;
  end loop;
  if lower(source) like 'aws.%' then
    perform outbox_enqueue_reject('source', 'must not start with "aws." (reserved for AWS services)', event_index);
  end if;
  if payload is null then
    perform outbox_enqueue_reject('payload', 'is required', event_index);
  elsif jsonb_typeof(payload) <> 'object' then
    perform outbox_enqueue_reject('payload', format(
      'must be a JSON object (got %s; EventBridge requires Detail to be an object)', jsonb_typeof(payload)), event_index);
  end if;
  if jsonb_path_exists(payload,
       'strict $.** ? (@.type() == "number" && (@ >= 9223372036854775808 || @ < -9223372036854775808))') then
    perform outbox_enqueue_reject('payload',
      'holds a number outside the int64 range EventBridge accepts; send it as a string', event_index);
  end if;
  if jsonb_path_exists(payload, 'strict $.**{1001}') then
    perform outbox_enqueue_reject('payload', 'nests deeper than 1000 levels', event_index);
  end if;
  metadata_bytes := octet_length(format(
    '{"metadata":{"eventId":"00000000-0000-0000-0000-000000000000","aggregateType":%s,"aggregateId":%s,"sequence":9007199254740991,"occurredAt":"2000-01-01T00:00:00.000Z"},"data":}',
    to_json(aggregate_type)::text, to_json(aggregate_id)::text));
  upper_bound := 14 + octet_length(source) + octet_length(event_type) + metadata_bytes + octet_length(payload::text);
  if upper_bound > max_entry_bytes then
    upper_bound := upper_bound - octet_length(payload::text) + outbox_json_bytes(payload);
    if upper_bound > max_entry_bytes then
      perform outbox_enqueue_reject('payload', format(
        'makes the EventBridge entry %s bytes, over the %s-byte limit', upper_bound, max_entry_bytes), event_index);
    end if;
  end if;
end
$fn$;

-- The insert of outbox_enqueue_many, in a function of its own so that it can run with or without
-- the exception block that turns a concurrent key into 40001: the block costs a subtransaction,
-- which only calls with idempotency keys pay. One statement: keep known keys and in-call repeats
-- out, bump each aggregate's counter by its number of new events (lock 2, in aggregate order),
-- insert them with sequence = new counter − count + rank in this call, and remember their keys.
create function outbox_enqueue_insert(
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
  bumped as (
    insert into outbox_aggregate as a (aggregate_type, aggregate_id, last_sequence)
    select aggregate_type, aggregate_id, count(*) from fresh
    group by aggregate_type, aggregate_id
    order by aggregate_type, aggregate_id
    on conflict (aggregate_type, aggregate_id)
      do update set last_sequence = a.last_sequence + excluded.last_sequence
    returning a.aggregate_type, a.aggregate_id, a.last_sequence
  ),
  numbered as (
    select f.*, gen_random_uuid() as event_id,
           b.last_sequence
             - count(*) over (partition by f.aggregate_type, f.aggregate_id)
             + row_number() over (partition by f.aggregate_type, f.aggregate_id order by f.ord) as sequence
    from fresh f join bumped b using (aggregate_type, aggregate_id)
  ),
  inserted as (
    insert into outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, source, payload, trace_header, idempotency_key)
    select event_id, aggregate_type, aggregate_id, sequence, event_type, source, payload, trace_header, idempotency_key
    from numbered
    order by ord
  ),
  remembered as (
    insert into outbox_idempotency_key (idempotency_key, event_id, aggregate_type, aggregate_id, sequence)
    select idempotency_key, event_id, aggregate_type, aggregate_id, sequence
    from numbered where idempotency_key is not null
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

-- Many events at once (what enqueueMany calls). The arrays are parallel, one element per event;
-- idempotency_keys and trace_headers may be null (none for any event) or hold nulls. Returns one row
-- per event, in input order (ord from 1). A key repeated inside the call, or already known, returns
-- the first event's id, aggregate and sequence with duplicate = true and writes nothing.
create function outbox_enqueue_many(
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

-- One event, with named parameters; see the top of this file.
create function outbox_enqueue(
  event_type text, source text, aggregate_type text, aggregate_id text, payload jsonb,
  idempotency_key text default null, trace_header text default null,
  max_entry_bytes integer default 1048576)
returns table (event_id uuid, sequence bigint, duplicate boolean)
language sql volatile as $fn$
  select m.event_id, m.sequence, m.duplicate
  from outbox_enqueue_many(
    array[outbox_enqueue.event_type], array[outbox_enqueue.source],
    array[outbox_enqueue.aggregate_type], array[outbox_enqueue.aggregate_id],
    array[outbox_enqueue.payload], array[outbox_enqueue.idempotency_key],
    array[outbox_enqueue.trace_header], outbox_enqueue.max_entry_bytes) as m
$fn$;
