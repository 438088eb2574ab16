-- Up Migration
-- Least privilege that works with PUBLIC's default privileges revoked (docs/database-access.md#producer-services-their-database-role-and-credentials).
--
--
-- Until now every outbox function ran with its caller's rights, so a producer role needed INSERT
-- and SELECT on outbox, outbox_aggregate and outbox_idempotency_key, which also let every producer
-- service read every other service's events (select payload from outbox), and a database that had
-- revoked EXECUTE from PUBLIC (a common hardening) refused the helpers that outbox_enqueue_many
-- calls. Now:
--   1. outbox_enqueue and outbox_enqueue_many run with the rights of their owner (the role that
--      applied the migrations, which owns the tables), with a fixed search_path that ends with
--      pg_temp, so that no object of the caller's (a temporary table named outbox_aggregate, a
--      function in another schema) can stand in for ours. A producer needs EXECUTE on these two
--      and nothing else: it can write events only as they do (validated, numbered, with their
--      locks), and read nothing.
--   2. Nobody but the owner and the roles granted it may execute any outbox function: EXECUTE is
--      revoked from PUBLIC, so that a definer function is not a way in for every login, and the
--      helpers are reachable only through the two entry points. `outbox migrate --roles` grants
--      EXECUTE on the entry points to outbox_producer (and revokes the table privileges older
--      versions gave it).
--   3. outbox_enqueue_check measures an entry with the largest int8 as the sequence (19 digits;
--      it assumed 16, 2^53 - 1), as the relay now writes any sequence exactly.

do $do$
declare
  schema_name text := current_schema();
begin
  execute format('alter function outbox_enqueue_many(text[], text[], text[], text[], jsonb[], text[], text[], integer) '
                 'security definer set search_path = pg_catalog, %I, pg_temp', schema_name);
  execute format('alter function outbox_enqueue(text, text, text, text, jsonb, text, text, integer) '
                 'security definer set search_path = pg_catalog, %I, pg_temp', schema_name);
end
$do$;

revoke execute on function
  outbox_enqueue(text, text, text, text, jsonb, text, text, integer),
  outbox_enqueue_many(text[], text[], text[], text[], jsonb[], text[], text[], integer),
  outbox_enqueue_insert(text[], text[], text[], text[], jsonb[], text[], text[], integer),
  outbox_enqueue_check(text, text, text, text, jsonb, text, text, integer, integer),
  outbox_enqueue_check_array(text, anyarray),
  outbox_enqueue_reject(text, text, integer),
  outbox_utf16_length(text),
  outbox_json_bytes(jsonb),
  outbox_ensure_role(text, integer, text[])
from public;

-- Checks one event as enqueue() does; see migration 007. Only the metadata placeholder changed:
-- the sequence is the largest int8, as the TypeScript validator measures it.
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
    '{"metadata":{"eventId":"00000000-0000-0000-0000-000000000000","aggregateType":%s,"aggregateId":%s,"sequence":9223372036854775807,"occurredAt":"2000-01-01T00:00:00.000Z"},"data":}',
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
