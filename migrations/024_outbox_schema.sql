-- Up Migration
-- The outbox in a schema of its own (issue 43). Its tables and functions lived in the admin's
-- current schema, usually `public`, which the privileged sessions (migrate, relay, monitor, CLI)
-- searched and which a producer may be able to create objects in: a planted operator, function or
-- cast that matched a privileged statement better than pg_catalog's ran with that session's rights
-- (node-pg-migrate's own `sql_identifier = 'literal'`, an ambiguous overload of an outbox function).
-- They now live in schema `outbox`, which `outbox migrate` creates owned by the admin (and refuses
-- when another role owns it or may create objects in it); every privileged session starts with
-- search_path `pg_catalog, outbox, pg_temp` (migrate: `outbox, pg_temp`, pg_catalog implicitly
-- first), so no schema another role can write is ever searched. On a fresh database migrations
-- 001-023 already created everything in `outbox` (they create in the migrating session's current
-- schema); this one moves an existing install, data and all, in place:
--
-- 1. The outbox's and the inbox's tables (their indexes, constraints, identity sequences, triggers
--    and row-level security policies move with them) and the outbox's functions owned by the
--    outbox table's owner (a same-named function another role planted stays where it is).
-- 2. The functions' bodies named their schema (migration 016's @extschema@): each is re-created
--    with `outbox.` for the old schema, and outbox_ensure_role's search_path names `outbox`.
-- 3. Every role holding a privilege on a moved table or function gets USAGE on schema `outbox`.
-- 4. The previous release keeps working beside this one during the deploy (expand/contract):
--    - its producers call outbox_enqueue and outbox_enqueue_many unqualified: forwarding wrappers
--      of the same signatures stay in the old schema (SECURITY INVOKER, calling the functions in
--      `outbox` by name and schema), executable by whoever could execute the originals. They are
--      dropped a release later: this release's producers call `outbox.outbox_enqueue(...)`.
--    - its relay, monitor and consumers run unqualified statements: a role holding a privilege on
--      the `outbox` table (relay, monitor) gets the role default search_path
--      `pg_catalog, outbox, pg_temp` (what `outbox migrate --roles` sets from now on); one holding
--      a privilege on an inbox table only (a consumer, which also uses its service's tables)
--      `"$user", public, outbox`, unless it has a search_path of its own. New sessions only.
-- The history table (outbox_migrations) was moved into `outbox` by `outbox migrate` before this
-- migration ran (shared/platform/migrate.ts), which also created the schema and checked that no
-- other role owns it or may create objects in it; done again here for a run of this file alone.
create schema if not exists outbox;
do $do$
begin
  if exists (select from pg_catalog.pg_namespace n
             where n.nspname = 'outbox'
               and (n.nspowner <> (select r.oid from pg_catalog.pg_roles r where r.rolname = current_user)
                    and not (select r.rolsuper from pg_catalog.pg_roles r where r.oid = n.nspowner)
                    or exists (select from pg_catalog.aclexplode(n.nspacl) a
                               where a.privilege_type = 'CREATE' and a.grantee <> n.nspowner))) then
    raise exception 'schema outbox is owned by or writable by a role other than the admin; drop or rename it, or revoke CREATE on it';
  end if;
end
$do$;
do $do$
declare
  legacy name;
  legacy_oid oid;
  legacy_count integer;
  grantee_oid oid;
  table_owner oid;
  r record;
  def text;
  args text;
  i integer;
begin
  select count(*), min(n.nspname) into legacy_count, legacy
  from pg_catalog.pg_class c join pg_catalog.pg_namespace n on n.oid = c.relnamespace
  where c.relname = 'outbox_aggregate' and c.relkind = 'r' and n.nspname <> 'outbox';
  if legacy_count > 1 then
    raise exception 'outbox tables found in % schemas; move all but one away before migrating', legacy_count;
  end if;
  if legacy is null then
    return; -- a fresh install: nothing outside `outbox`
  end if;
  select n.oid into legacy_oid from pg_catalog.pg_namespace n where n.nspname = legacy;
  select c.relowner into table_owner from pg_catalog.pg_class c
  where c.relname = 'outbox' and c.relnamespace = legacy_oid;

  -- 1. Tables, then functions.
  for r in
    select c.relname from pg_catalog.pg_class c
    where c.relnamespace = legacy_oid and c.relkind in ('r', 'p')
      and c.relname in ('outbox', 'outbox_aggregate', 'outbox_idempotency_key', 'inbox_message',
                        'inbox_aggregate', 'inbox_gap', 'inbox_failed')
  loop
    execute pg_catalog.format('alter table %I.%I set schema outbox', legacy, r.relname);
  end loop;
  for r in
    select p.oid::regprocedure::text as signature from pg_catalog.pg_proc p
    where p.pronamespace = legacy_oid and p.proowner = table_owner
      and p.proname in ('outbox_aggregate_refuse_stale_bump', 'outbox_enqueue', 'outbox_enqueue_check',
                        'outbox_enqueue_check_array', 'outbox_enqueue_insert', 'outbox_enqueue_many',
                        'outbox_enqueue_reject', 'outbox_ensure_role', 'outbox_inbox_policy',
                        'outbox_json_bytes', 'outbox_utf16_length')
  loop
    execute pg_catalog.format('alter function %s set schema outbox', r.signature);
  end loop;

  -- 2. Bodies and search_paths that named the old schema.
  for r in
    select p.oid, p.oid::regprocedure::text as signature, p.proconfig from pg_catalog.pg_proc p
    where p.pronamespace = 'outbox'::regnamespace
  loop
    def := pg_catalog.pg_get_functiondef(r.oid);
    if def operator(pg_catalog.~) ('\m' || pg_catalog.quote_ident(legacy) || '\.') then
      execute pg_catalog.regexp_replace(def, '\m' || pg_catalog.quote_ident(legacy) || '\.', 'outbox.', 'g');
    end if;
    if pg_catalog.array_to_string(r.proconfig, ' ') operator(pg_catalog.~~) ('%search_path=%' || legacy || '%') then
      execute pg_catalog.format('alter function outbox.%s set search_path = pg_catalog, outbox, pg_temp',
        pg_catalog.substr(r.signature, pg_catalog.strpos(r.signature, 'outbox_')));
    end if;
  end loop;

  -- 3. USAGE on the schema for every role that held a privilege on what moved.
  for r in
    select distinct a.grantee from pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
    where c.relnamespace = 'outbox'::regnamespace and a.grantee <> 0 and a.grantee <> c.relowner
    union
    select distinct a.grantee from pg_catalog.pg_proc p, pg_catalog.aclexplode(p.proacl) a
    where p.pronamespace = 'outbox'::regnamespace and a.grantee <> 0 and a.grantee <> p.proowner
  loop
    execute pg_catalog.format('grant usage on schema outbox to %s', r.grantee::regrole::text);
  end loop;

  -- 4. The previous release: forwarding wrappers for its producers ...
  for r in
    select p.oid, p.proname, p.pronargs, p.proacl from pg_catalog.pg_proc p
    where p.pronamespace = 'outbox'::regnamespace and p.proname in ('outbox_enqueue', 'outbox_enqueue_many')
      and p.prosecdef
  loop
    args := '';
    for i in 1 .. r.pronargs loop
      args := args || case when i > 1 then ', ' else '' end || '$' || i;
    end loop;
    execute pg_catalog.format(
      'create function %I.%I(%s) returns %s language sql volatile set search_path = pg_catalog, pg_temp as %L',
      legacy, r.proname, pg_catalog.pg_get_function_arguments(r.oid), pg_catalog.pg_get_function_result(r.oid),
      pg_catalog.format('select * from outbox.%I(%s)', r.proname, args));
    execute pg_catalog.format('comment on function %I.%I(%s) is %L', legacy, r.proname,
      pg_catalog.pg_get_function_identity_arguments(r.oid),
      'Forwards to outbox.' || r.proname || ' for producers of the release before migration 024; dropped a release later.');
    execute pg_catalog.format('revoke all on function %I.%I(%s) from public', legacy, r.proname,
      pg_catalog.pg_get_function_identity_arguments(r.oid));
    for grantee_oid in
      select distinct a.grantee from pg_catalog.aclexplode(r.proacl) a
      where a.grantee <> 0 and a.privilege_type = 'EXECUTE'
    loop
      execute pg_catalog.format('grant execute on function %I.%I(%s) to %s', legacy, r.proname,
        pg_catalog.pg_get_function_identity_arguments(r.oid), grantee_oid::regrole::text);
    end loop;
  end loop;

  -- ... and role default search_paths for its relay, monitor and consumers.
  for r in
    select distinct a.grantee::regrole::text as role_name,
           pg_catalog.bool_or(c.relname = 'outbox') as outbox_reader
    from pg_catalog.pg_class c, pg_catalog.aclexplode(c.relacl) a
    where c.relnamespace = 'outbox'::regnamespace and a.grantee <> 0 and a.grantee <> c.relowner
    group by a.grantee
  loop
    if r.outbox_reader then
      execute pg_catalog.format('alter role %s set search_path = pg_catalog, outbox, pg_temp', r.role_name);
    elsif not exists (
      select from pg_catalog.pg_db_role_setting s
      where s.setrole = r.role_name::regrole and s.setdatabase in (0, (select oid from pg_catalog.pg_database
                                                                     where datname = pg_catalog.current_database()))
        and pg_catalog.array_to_string(s.setconfig, ' ') operator(pg_catalog.~~) '%search_path=%'
    ) then
      execute pg_catalog.format('alter role %s set search_path = "$user", public, outbox', r.role_name);
    end if;
  end loop;
end
$do$;
