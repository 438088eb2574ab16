-- Up Migration
-- One consumer cannot stall another (issue 43). A consumer's own role (migration 020) held
-- table-level UPDATE and DELETE on the inbox tables, which is what LOCK TABLE asks for in every mode
-- above ROW EXCLUSIVE: `lock table inbox_message in access exclusive mode` in a transaction left
-- open stopped every other consumer's next event for its whole invocation, failure trace included.
-- From this release `outbox migrate --roles` gives the inbox roles column-level UPDATE instead
-- (LOCK TABLE checks table-level privileges only, so the strongest table lock such a role can take
-- is ROW EXCLUSIVE, which none of the inbox's statements waits for), and no DELETE: the two deletes
-- the inbox makes go through the functions below.
--
-- outbox_inbox_forget_failed(consumer, event_id, message_key) deletes the failure traces of one
-- event (event_id) or business key (message_key) of a consumer (shared/consumer/sql/record-message.ts,
-- failed.ts); outbox_inbox_forget_gap(consumer, message_key) an event's wait-for-gap row
-- (shared/consumer/sql/gap.ts). Each returns the rows deleted. They run with their owner's rights
-- (the tables' owner, not subject to row-level security), so each first checks that the session may
-- touch that consumer's rows, as the table's policies say (migration 020, outbox_inbox_policy): the
-- session's user is the tables' owner or a member of it, bypasses row-level security, or is a member
-- of a role (or PUBLIC) whose policy on the table is every consumer's (`true`) or this consumer's;
-- otherwise SQLSTATE 42501. The session's user, not the current one (which is the owner inside
-- these functions): a login can do what every role it may SET ROLE to can, so this allows nothing
-- the login could not do itself. EXECUTE is revoked from PUBLIC; `outbox migrate --roles` grants it
-- to the inbox roles. `search_path = pg_catalog, pg_temp` and every name qualified (migration 016).
--
-- The previous release's consumers delete with DELETE: they keep working until the roles are
-- ensured by this release (docs/consumer-deploying.md#the-consumers-database-role).

do $do$
begin
  execute replace($sql$
create function @extschema@.outbox_inbox_check_consumer(table_name regclass, consumer text)
returns void language plpgsql stable set search_path = pg_catalog, pg_temp as $fn$
declare
  p record;
begin
  -- The common case first, one index probe: the session logged in as a role whose own policy
  -- (named after it by outbox_inbox_policy) is this consumer's or every consumer's.
  select q.polqual, q.polrelid into p from pg_catalog.pg_policy q
  where q.polrelid = table_name and q.polname = session_user and q.polcmd in ('*', 'd')
    and pg_catalog.to_regrole(pg_catalog.quote_ident(session_user)) = any (q.polroles);
  if found and pg_catalog.pg_get_expr(p.polqual, p.polrelid)
               in ('true', pg_catalog.format('(consumer = %L::text)', consumer)) then
    return;
  end if;
  -- Else the policies of every role the session's user is a member of, or PUBLIC's.
  for p in
    select q.polqual, q.polrelid from pg_catalog.pg_policy q
    where q.polrelid = table_name and q.polcmd in ('*', 'd')
      and (0::oid = any (q.polroles)
           or exists (select from pg_catalog.unnest(q.polroles) as g(role_oid)
                      where pg_catalog.pg_has_role(session_user, g.role_oid, 'MEMBER')))
  loop
    if pg_catalog.pg_get_expr(p.polqual, p.polrelid)
       in ('true', pg_catalog.format('(consumer = %L::text)', consumer)) then
      return;
    end if;
  end loop;
  if pg_catalog.pg_has_role(session_user,
       (select c.relowner from pg_catalog.pg_class c where c.oid = table_name), 'MEMBER')
     or (select r.rolbypassrls from pg_catalog.pg_roles r where r.rolname = session_user) then
    return;
  end if;
  raise exception 'permission denied: role % may not touch the % rows of consumer %',
    session_user, table_name, consumer using errcode = '42501';
end
$fn$;
revoke execute on function @extschema@.outbox_inbox_check_consumer(regclass, text) from public;

create function @extschema@.outbox_inbox_forget_failed(consumer text, event_id text, message_key text)
returns integer language plpgsql security definer set search_path = pg_catalog, pg_temp as $fn$
declare
  deleted integer;
begin
  perform @extschema@.outbox_inbox_check_consumer('@extschema@.inbox_failed'::regclass, consumer);
  delete from @extschema@.inbox_failed f
  where f.consumer = outbox_inbox_forget_failed.consumer
    and (f.event_id = outbox_inbox_forget_failed.event_id
         or f.message_key = outbox_inbox_forget_failed.message_key);
  get diagnostics deleted = row_count;
  return deleted;
end
$fn$;
revoke execute on function @extschema@.outbox_inbox_forget_failed(text, text, text) from public;

create function @extschema@.outbox_inbox_forget_gap(consumer text, message_key text)
returns integer language plpgsql security definer set search_path = pg_catalog, pg_temp as $fn$
declare
  deleted integer;
begin
  perform @extschema@.outbox_inbox_check_consumer('@extschema@.inbox_gap'::regclass, consumer);
  delete from @extschema@.inbox_gap g
  where g.consumer = outbox_inbox_forget_gap.consumer
    and g.message_key = outbox_inbox_forget_gap.message_key;
  get diagnostics deleted = row_count;
  return deleted;
end
$fn$;
revoke execute on function @extschema@.outbox_inbox_forget_gap(text, text) from public;
$sql$, '@extschema@', quote_ident(current_schema()));
end
$do$;

-- The roles that write the inbox today (INSERT on its tables: outbox_consumer, each consumer's own
-- role, roles of your own) may call the functions at once, before the next `outbox migrate --roles`:
-- this release's inbox calls them instead of deleting.
do $do$
declare
  g record;
begin
  for g in
    select distinct a.grantee, f.signature
    from pg_catalog.pg_class c
    cross join lateral pg_catalog.aclexplode(c.relacl) a
    join (values ('inbox_failed'::regclass, 'outbox_inbox_forget_failed(text, text, text)'),
                 ('inbox_gap'::regclass, 'outbox_inbox_forget_gap(text, text)')) as f(table_oid, signature)
      on f.table_oid = c.oid
    where a.privilege_type = 'INSERT' and a.grantee <> c.relowner
  loop
    execute pg_catalog.format('grant execute on function %s to %s', g.signature,
      case when g.grantee = 0 then 'public'
           else pg_catalog.quote_ident((select r.rolname::text from pg_catalog.pg_roles r where r.oid = g.grantee)) end);
  end loop;
end
$do$;
