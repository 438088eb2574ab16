-- Up Migration
-- The heartbeat (issue 49, docs/observe.md#the-heartbeat): the monitor enqueues one event per
-- interval through the outbox itself, so that each consumer can tell that the whole way (relay,
-- bus, rule, consumer) still carries events while no business event flows, and its alarm can say
-- where it stopped.
--
-- outbox_enqueue_heartbeat(interval_seconds) enqueues a `OutboxHeartbeat` event from
-- `outbox.heartbeat` (aggregate `outbox.heartbeat` / `heartbeat`, payload `{}`) unless one was
-- enqueued in the current interval: its idempotency key names the interval's start on the
-- database's clock (`heartbeat:<epoch seconds>`), so a monitor that runs every minute, retried or
-- twice at once, enqueues one per interval. It runs as its owner (SECURITY DEFINER), so that the
-- monitor role, which may not enqueue anything else, needs only EXECUTE on it (granted by
-- ensureRoles, shared/relay/operations/roles.ts); like migration 016's functions it runs with
-- `search_path = pg_catalog, pg_temp` and names every outbox object with its schema, and calls
-- outbox_enqueue with exactly its parameters' types, so no object a caller created can run in it.
do $do$
begin
  execute replace($sql$
create or replace function @extschema@.outbox_enqueue_heartbeat(interval_seconds integer)
returns table (event_id uuid, sequence bigint, duplicate boolean)
language plpgsql volatile security definer
set search_path = pg_catalog, pg_temp as $fn$
declare
  interval_start bigint;
begin
  if interval_seconds is null or interval_seconds < 60 or interval_seconds > 86400 then
    perform @extschema@.outbox_enqueue_reject('interval_seconds'::text,
      'must be a number of seconds from 60 to 86400'::text, null::integer);
  end if;
  interval_start := (floor(extract(epoch from clock_timestamp()) / interval_seconds) * interval_seconds)::bigint;
  return query select e.event_id, e.sequence, e.duplicate
    from @extschema@.outbox_enqueue('OutboxHeartbeat'::text, 'outbox.heartbeat'::text,
      'outbox.heartbeat'::text, 'heartbeat'::text, '{}'::jsonb,
      ('heartbeat:' || interval_start::text)::text, null::text, 1048576::integer) as e;
end
$fn$;
$sql$, '@extschema@', quote_ident(current_schema()));
end
$do$;

-- EXECUTE for the monitor role only (ensureRoles grants it), not for every role by default.
revoke all on function outbox_enqueue_heartbeat(integer) from public;
