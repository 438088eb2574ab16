-- Up Migration
-- Creates (if missing) a login role and applies its grants; used by the deploy-time migrate
-- function (shared/roles.ts). Roles are cluster-wide, so they are made by code, per deployment,
-- rather than by a numbered migration. `rds_iam` exists only on Amazon RDS.
create or replace function outbox_ensure_role(role_name text, timeout_ms integer, grant_templates text[])
returns void language plpgsql as $fn$
declare t text;
begin
  if not exists (select from pg_roles where rolname = role_name) then
    execute format('create role %I login', role_name);
  end if;
  if exists (select from pg_roles where rolname = 'rds_iam') then
    execute format('grant rds_iam to %I', role_name);
  end if;
  execute format('grant usage on schema public to %I', role_name);
  execute format('alter role %I set statement_timeout = %L', role_name, timeout_ms || 'ms');
  foreach t in array grant_templates loop
    execute format(t, role_name);
  end loop;
end
$fn$;
