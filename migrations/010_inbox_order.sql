-- Up Migration
-- The order-aware inbox, reworked (docs/inbox-order.md#order-what-a-consumer-may-rely-on):
--
-- 1. typeSequence: each event also carries its rank among its aggregate's events *of the same
--    type* (1, 2, 3… per aggregate_type, aggregate_id, event_type), so that a consumer whose rule
--    delivers only some event types can still tell a gap (OrderPaid #2 of its type after #1 of its
--    type) from an event it was never meant to receive. The producer keeps it in the statement
--    that already bumps the aggregate's counter: 8 bytes in the outbox row, and the aggregate's
--    counter row holds one count per event type it has seen.
-- 2. The inbox keys its order state by source and by chain (the whole aggregate, or one event type
--    of it), keeps a parked event whole so that an operator can re-apply it, and records the
--    outcome of every event it did not apply.

-- NULL for the events enqueued before this migration: consumers then skip the per-type check.
alter table outbox add column type_sequence bigint;

-- {"OrderPlaced": 1, "OrderPaid": 2}: how many events of each type the aggregate has had since
-- this migration (NULL until its first one).
alter table outbox_aggregate add column type_counts jsonb;

-- Checks one event as enqueue() does; the same function as in migration 009 but for the bound on
-- the metadata's size, which now includes "typeSequence" (as large as the sequence, 19 digits).
create or replace function outbox_enqueue_check(
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
    '{"metadata":{"eventId":"00000000-0000-0000-0000-000000000000","aggregateType":%s,"aggregateId":%s,"sequence":9223372036854775807,"typeSequence":9223372036854775807,"occurredAt":"2000-01-01T00:00:00.000Z"},"data":}',
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

-- The insert of outbox_enqueue_many (migration 007), now also numbering each event within its
-- type: the counter row's upsert adds this call's count of each type to type_counts, under the
-- same row lock as last_sequence, and each event's type_sequence is derived from the new count
-- exactly as its sequence is from the new last_sequence (new count − this call's count of the type
-- + rank in this call). No statement is added.
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

-- The inbox record now says which event it is, where it came from, and, for an event the handler
-- did not apply, why. outcome: 'processed' (applied), 'stale' (ignore-stale: superseded by a later
-- event of its chain; 'skipped' before this migration), 'parked' (wait-for-gap: set aside after its
-- wait, `event` holds it whole), 'replaying' (an operator asked to re-apply it: its next delivery
-- runs the handler), 'discarded' (an operator decided not to apply it).
alter table inbox_message
  add column event_id   text,
  add column source     text,
  add column event_type text,
  add column reason     text,
  add column event      jsonb;

-- Parked events awaiting an operator: counted by the monitor, listed by `outbox inbox parked`.
create index inbox_message_parked_idx on inbox_message (consumer, processed_at)
  where outcome in ('parked', 'replaying');

-- Order state per source too (two producers may both have an aggregate order/42), and per chain:
-- '' for the whole aggregate (sequence), or an event type for a consumer that receives only some
-- types (typeSequence). The rows written before this migration keep source '': the first event of
-- each source adopts their position.
alter table inbox_aggregate
  add column source text not null default '',
  add column chain  text not null default '';
alter table inbox_aggregate drop constraint inbox_aggregate_pkey;
alter table inbox_aggregate add primary key (consumer, aggregate_type, aggregate_id, source, chain);
-- Serves pruning, oldest first.
create index inbox_aggregate_updated_at_idx on inbox_aggregate (updated_at);

-- wait-for-gap: a row per event that is waiting for a missing predecessor, keyed by its eventId
-- (message_key). last_seen_at tells Lambda's retries (minutes apart) from a replay of the event
-- days later, which waits anew.
alter table inbox_gap add column last_seen_at timestamptz not null default now();
create index inbox_gap_last_seen_at_idx on inbox_gap (last_seen_at);
