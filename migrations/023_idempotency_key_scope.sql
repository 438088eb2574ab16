-- Up Migration
-- Idempotency keys scoped to their producer (issue 43, item 4). A key was global: a producer that
-- enqueued another service's key got back that service's event id, aggregate and sequence, and one
-- that enqueued a key first made the other service's later event a "duplicate" that was never
-- stored. A key now answers only for the same producer role (the session's login role,
-- `session_user`: SECURITY DEFINER does not change it) and the same event source. Keys written
-- before this migration carry producer and source '' and keep answering as before (for any
-- producer) until their retention ends; where their event is still in the outbox, the source is
-- filled in from it.
alter table outbox_idempotency_key
  add column producer text not null default '',
  add column source text not null default '';

update outbox_idempotency_key k set source = o.source from outbox o where o.event_id = k.event_id;

-- The same name as before: outbox_enqueue_many tells a concurrent writer of the same key by it.
alter table outbox_idempotency_key drop constraint outbox_idempotency_key_pkey;
alter table outbox_idempotency_key
  add constraint outbox_idempotency_key_pkey primary key (idempotency_key, producer, source);

alter table outbox_idempotency_key alter column producer drop default, alter column source drop default;

do $do$
begin
  execute replace($sql$
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
  -- Each event, with the event its key already names, and the first event of the call with its key.
  keyed as (
    select i.*,
           k.event_id as known_event_id, k.aggregate_type as known_aggregate_type,
           k.aggregate_id as known_aggregate_id, k.sequence as known_sequence,
           case when i.idempotency_key is null then i.ord
                else min(i.ord) over (partition by i.idempotency_key, i.source) end as first_ord
    from input i
    -- A key answers for its own producer role and source only; a key written before migration 023
    -- (producer and source '') for any, until it expires.
    left join @extschema@.outbox_idempotency_key k
      on k.idempotency_key = i.idempotency_key
     and (k.producer = session_user::text or k.producer = ''::text)
     and (k.source = i.source or k.source = ''::text)
  ),
  fresh as (
    select * from keyed where known_event_id is null and ord = first_ord
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
    -- occurred_at: read once this aggregate's counter row is ours (migration 016, item 2).
    returning a.aggregate_type, a.aggregate_id, a.last_sequence + a.sequence_offset as last_sequence, a.type_counts,
              clock_timestamp() as occurred_at
  ),
  -- The fresh events and their aggregates' counter rows in one set: the counter row (kind 0)
  -- sorts first in its aggregate's partition, and first_value hands its values to the events.
  counted as (
    select 1 as kind, f.ord, f.event_type, f.source, f.aggregate_type, f.aggregate_id, f.payload,
           f.idempotency_key, f.trace_header,
           null::bigint as last_sequence, null::jsonb as type_counts, null::timestamptz as occurred_at
    from fresh f
    union all
    select 0, null, null, null, b.aggregate_type, b.aggregate_id, null, null, null,
           b.last_sequence, b.type_counts, b.occurred_at
    from bumped b
  ),
  spread as (
    select c.*,
           first_value(c.last_sequence) over aggregate_rows as aggregate_last_sequence,
           first_value(c.type_counts) over aggregate_rows as aggregate_type_counts,
           first_value(c.occurred_at) over aggregate_rows as aggregate_occurred_at
    from counted c
    window aggregate_rows as (partition by c.aggregate_type, c.aggregate_id order by c.kind)
  ),
  numbered as (
    select s.ord, s.event_type, s.source, s.aggregate_type, s.aggregate_id, s.payload,
           s.idempotency_key, s.trace_header,
           gen_random_uuid() as event_id, s.aggregate_occurred_at as occurred_at,
           s.aggregate_last_sequence
             - count(*) over (partition by s.aggregate_type, s.aggregate_id)
             + row_number() over (partition by s.aggregate_type, s.aggregate_id order by s.ord) as sequence,
           (s.aggregate_type_counts ->> s.event_type)::bigint
             - count(*) over (partition by s.aggregate_type, s.aggregate_id, s.event_type)
             + row_number() over (partition by s.aggregate_type, s.aggregate_id, s.event_type order by s.ord) as type_sequence
    from spread s
    where s.kind = 1
  ),
  inserted as (
    insert into @extschema@.outbox (event_id, aggregate_type, aggregate_id, sequence, type_sequence, event_type, source,
                                    payload, trace_header, idempotency_key, created_at)
    select event_id, aggregate_type, aggregate_id, sequence, type_sequence, event_type, source, payload, trace_header,
           idempotency_key, occurred_at
    from numbered
    order by ord
    returning id, event_id, aggregate_type, aggregate_id, sequence, idempotency_key, source
  ),
  remembered as (
    insert into @extschema@.outbox_idempotency_key (idempotency_key, producer, source, event_id, aggregate_type,
                                                    aggregate_id, sequence, outbox_id)
    select r.idempotency_key, session_user::text, r.source, r.event_id, r.aggregate_type, r.aggregate_id, r.sequence, r.id
    from inserted r where r.idempotency_key is not null
  ),
  -- Every event of the call: the fresh ones with their values; a known one with the event its key
  -- names; a later one with the key of an earlier fresh one without values, which first_value takes
  -- from that one (the lowest ord of its first_ord partition).
  answered as (
    select n.ord, n.ord as first_ord, n.event_id, n.aggregate_type, n.aggregate_id, n.sequence, false as duplicate
    from numbered n
    union all
    select k.ord, k.first_ord, k.known_event_id, k.known_aggregate_type, k.known_aggregate_id, k.known_sequence, true
    from keyed k
    where k.known_event_id is not null or k.ord <> k.first_ord
  )
  select a.ord,
         coalesce(a.event_id, first_value(a.event_id) over call_key),
         coalesce(a.aggregate_type, first_value(a.aggregate_type) over call_key),
         coalesce(a.aggregate_id, first_value(a.aggregate_id) over call_key),
         coalesce(a.sequence, first_value(a.sequence) over call_key),
         a.duplicate
  from answered a
  window call_key as (partition by a.first_ord order by a.ord)
  order by a.ord
$fn$;
$sql$, '@extschema@', quote_ident(current_schema()));
end
$do$;
