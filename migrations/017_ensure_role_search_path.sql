-- Up Migration
-- outbox_ensure_role runs as the admin at every `outbox migrate --roles` (every deploy). Its
-- unqualified format() calls resolved through the admin's search_path, where a producer that may
-- create objects in the outbox's schema could plant format(text, text): a better match than
-- pg_catalog.format(text, VARIADIC "any"), run with the admin's rights (issue 31, found after
-- migration 016). Now it has a fixed search_path with pg_catalog first, and every call that
-- pg_catalog does not match exactly names pg_catalog (test/producer/enqueue-definer.test.ts).
do $do$
begin
  execute replace($sql$
create or replace function @extschema@.outbox_ensure_role(role_name text, timeout_ms integer, grant_templates text[])
returns void language plpgsql set search_path = pg_catalog, @extschema@, pg_temp as $fn$
declare t text;
begin
  if not exists (select from pg_catalog.pg_roles where rolname = role_name) then
    execute pg_catalog.format('create role %I login', role_name);
  end if;
  if exists (select from pg_catalog.pg_roles where rolname = 'rds_iam') then
    execute pg_catalog.format('grant rds_iam to %I', role_name);
  end if;
  -- The outbox's schema: 'outbox' resolves through this function's search_path.
  execute pg_catalog.format('grant usage on schema %I to %I',
    (select n.nspname from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
     where c.oid = 'outbox'::regclass::oid), role_name);
  execute pg_catalog.format('alter role %I set statement_timeout = %L', role_name,
    pg_catalog.format('%sms', timeout_ms));
  foreach t in array grant_templates loop
    execute pg_catalog.format(t, role_name);
  end loop;
end
$fn$;
$sql$, '@extschema@', quote_ident(current_schema()));
end
$do$;
