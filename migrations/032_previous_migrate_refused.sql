-- Up Migration
-- The release before migration 024 keeps its history in public.outbox_migrations (node-pg-migrate's
-- default schema), which `outbox migrate` moved into schema `outbox` (or, on a fresh install,
-- created there). A stack rolled back to that release runs its migrate Trigger again: not finding
-- its history, it applied its migrations 001-023 again in the admin's current schema, `public`, a
-- second outbox beside the real one, where the previous release's producers (their unqualified
-- `outbox_enqueue`) then enqueued and no relay or monitor looked (the relay and monitor roles
-- search `outbox`): events written and never sent, with no alarm. On a database this release
-- upgraded it failed instead (the forwarding wrappers of 024 were in its way), after creating an
-- empty public.outbox_migrations.
--
-- A view of that name in `public` makes it refuse on both, before it applies anything: its
-- history check finds the relation but no primary key, and adding one to a view fails ("ALTER
-- action ADD CONSTRAINT cannot be performed on relation "outbox_migrations""). Roll back the code,
-- not the migration (docs/deploying.md#migrations-on-update-expand-then-contract). This release's
-- `outbox migrate` never reads it (its search_path is `outbox, pg_temp`). Dropped with 024's
-- wrappers a release later. An empty table a refused run of the previous release left goes first.
do $do$
begin
  if not exists (select from pg_catalog.pg_namespace where nspname = 'public') then
    return; -- no public schema: the previous release's migrate could not have run there either
  end if;
  if pg_catalog.to_regclass('outbox.outbox_migrations') is null then
    return; -- the files applied by hand, not by `outbox migrate`: no history to point at
  end if;
  -- Nested: the count is planned only once the table is known to exist.
  -- Only a table of ours: another role may create in public, and a table it planted there must
  -- not make this migration fail (we may not drop it) nor be dropped on its word.
  if (select c.relkind = 'r' and c.relowner = (select r.oid from pg_catalog.pg_roles r where r.rolname = current_user)
      from pg_catalog.pg_class c
      where c.oid = pg_catalog.to_regclass('public.outbox_migrations')) then
    if not exists (select from public.outbox_migrations) then
      drop table public.outbox_migrations;
    end if;
  end if;
  if pg_catalog.to_regclass('public.outbox_migrations') is null then
    create view public.outbox_migrations as select id, name, run_on from outbox.outbox_migrations;
    comment on view public.outbox_migrations is
      'Makes the outbox migrate of a release before migration 024 refuse (it would install a second outbox in public); dropped a release later.';
    revoke all on public.outbox_migrations from public;
  end if;
end
$do$;
