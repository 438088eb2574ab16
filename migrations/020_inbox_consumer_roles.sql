-- Up Migration
-- Each consumer's inbox rows belong to it (issue 33). Until now every consumer logged in as one
-- role, outbox_consumer, with UPDATE on every consumer's records: one consumer could set another's
-- processed record to 'replaying' (that consumer then applied the event again on its next
-- delivery) or rewrite the parked `event` that `outbox inbox parked replay` invokes it with.
--
-- 1. inbox_message, inbox_aggregate, inbox_gap and inbox_failed (migration 019) have row-level security. A role touches the rows
--    its policies allow, one policy per role and table, named after the role: `consumer = 'billing'`
--    for a consumer's own role (`outbox migrate --roles --consumer billing` creates
--    outbox_consumer_billing, shared/relay/operations/roles.ts), `true` for the roles that work on
--    every consumer's rows (the monitor, which prunes and counts them, and the shared
--    outbox_consumer role, which keeps working as before). A policy applies to the role's members
--    too (a login granted outbox_monitor works as the monitor); a role with no policy sees no row,
--    whatever its privileges. The tables' owner (the role that applies the migrations) is not
--    subject to it (no FORCE): migrations and an admin's `outbox inbox parked …` see every row.
-- 2. The hot path: the planner keeps only the policies of the current role, so a consumer's
--    statements get one constant condition, `consumer = 'billing'`, which the primary keys
--    (consumer first) serve and the inbox's own conditions already imply; no function call, no
--    subquery, no lookup per row or per statement. (A first design, one policy for every role
--    reading a consumer-to-role mapping table through a function, cost 10–20 µs of database CPU
--    per statement for its per-statement subquery, about 50 % more CPU per inbox event;
--    bench/inbox-rls.ts measures the policy against none.)
-- 3. outbox_inbox_policy(table, role, consumer) creates or updates one such policy (consumer NULL:
--    every consumer), and does nothing when it is already so: `outbox migrate --roles` calls it at
--    every deploy, and CREATE or ALTER POLICY takes an ACCESS EXCLUSIVE lock on the table. It runs
--    with its caller's rights (only the tables' owner may change their policies), EXECUTE revoked
--    from PUBLIC (migration 009), with `search_path = pg_catalog, pg_temp` and every name
--    qualified, as migrations 016 and 017 do.
-- 4. Backward compatibility: every role that holds a privilege on one of the four tables now
--    (outbox_consumer, outbox_monitor, roles of your own; PUBLIC if it was granted one) gets an
--    every-consumer policy, so an existing deployment works unchanged after this migration.

do $do$
begin
  execute replace($sql$
create function @extschema@.outbox_inbox_policy(table_name regclass, role_name text, consumer text)
returns void language plpgsql set search_path = pg_catalog, pg_temp as $fn$
declare
  qual text := case when consumer is null then 'true'
                    else pg_catalog.format('(consumer = %L::text)', consumer) end;
  role_oids oid[] := array[case when role_name = 'public' then 0::oid
                                else pg_catalog.quote_ident(role_name)::regrole::oid end];
  existing record;
begin
  if table_name not in ('@extschema@.inbox_message'::regclass, '@extschema@.inbox_aggregate'::regclass,
                        '@extschema@.inbox_gap'::regclass, '@extschema@.inbox_failed'::regclass) then
    raise exception 'outbox_inbox_policy: % is not an inbox table', table_name using errcode = '22023';
  end if;
  select pg_catalog.pg_get_expr(p.polqual, p.polrelid) as using_expr, p.polroles as to_roles,
         p.polcmd as command, p.polpermissive as permissive, p.polwithcheck is null as no_check
  into existing
  from pg_catalog.pg_policy p
  where p.polrelid = table_name and p.polname = role_name;
  if not found then
    execute pg_catalog.format('create policy %I on %s for all to %I using (%s)',
      role_name, table_name, role_name, qual);
  elsif existing.using_expr is distinct from qual or existing.to_roles is distinct from role_oids
        or existing.command <> '*' or not existing.permissive or not existing.no_check then
    execute pg_catalog.format('drop policy %I on %s', role_name, table_name);
    execute pg_catalog.format('create policy %I on %s for all to %I using (%s)',
      role_name, table_name, role_name, qual);
  end if;
end
$fn$;
revoke execute on function @extschema@.outbox_inbox_policy(regclass, text, text) from public;

alter table @extschema@.inbox_message enable row level security;
alter table @extschema@.inbox_aggregate enable row level security;
alter table @extschema@.inbox_gap enable row level security;
alter table @extschema@.inbox_failed enable row level security;
$sql$, '@extschema@', quote_ident(current_schema()));
end
$do$;

-- The roles that use the tables today keep every consumer's rows.
do $do$
declare
  g record;
begin
  for g in
    -- table privileges, and column privileges (the monitor's select on some of inbox_message's)
    select c.oid as table_oid, a.grantee, c.relowner
    from pg_catalog.pg_class c cross join lateral pg_catalog.aclexplode(c.relacl) a
    where c.oid in ('inbox_message'::regclass, 'inbox_aggregate'::regclass, 'inbox_gap'::regclass,
                    'inbox_failed'::regclass)
    union
    select c.oid, a.grantee, c.relowner
    from pg_catalog.pg_class c
    join pg_catalog.pg_attribute t on t.attrelid = c.oid
    cross join lateral pg_catalog.aclexplode(t.attacl) a
    where c.oid in ('inbox_message'::regclass, 'inbox_aggregate'::regclass, 'inbox_gap'::regclass,
                    'inbox_failed'::regclass)
  loop
    continue when g.grantee = g.relowner;
    perform outbox_inbox_policy(g.table_oid::regclass,
      case when g.grantee = 0 then 'public' else (select r.rolname::text from pg_catalog.pg_roles r where r.oid = g.grantee) end,
      null::text);
  end loop;
end
$do$;
