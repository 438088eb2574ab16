-- Up Migration
-- A chain is one outbox's (issue 45, item 6; docs/inbox-order.md#two-outboxes-one-consumer). Each
-- outbox database numbers its aggregates' events on its own counter (outbox_aggregate), so two
-- outboxes that both publish `order/8842` make two histories #1, #2, #3…; an inbox that keyed the
-- chain by aggregate alone took the second outbox's #1–#3 as stale (or waited for numbers the first
-- had taken).
--
-- 1. The outbox's identity: a random uuid drawn once, when this migration runs, in a one-row table.
--    The relay reads it once per run and writes it into every event's Detail as
--    `metadata.outboxId`. A database cloned from another one (a snapshot restored as a second
--    outbox) carries the same id: give the clone a new one before its relay first publishes
--    (`update outbox.outbox_identity set outbox_id = gen_random_uuid()`); changing it later starts
--    new chains at every consumer.
-- 2. The inbox's chain rows name the outbox that numbered them (`inbox_aggregate.outbox_id`). The
--    row a chain had before (source '', chain '' or a type) is adopted in place by the first outbox
--    whose named event arrives; events without an outboxId (a previous release's relay) keep using
--    that row, as a previous release's consumer does (it ignores the column). Another outbox's
--    chain is a row of its own whose `chain` names the outbox (shared/consumer/sql/chain.ts), which
--    no previous release reads or raises.
-- 3. The inbox's records name their outbox too (`inbox_message.outbox_id`): a record held by
--    parkAfterAttempts holds only its own outbox's events of the aggregate.
-- NULL everywhere for rows written before (and by a previous release): read as "no outbox named".
create table outbox_identity (
  singleton boolean primary key default true check (singleton),
  outbox_id uuid not null default pg_catalog.gen_random_uuid(),
  created_at timestamptz not null default pg_catalog.now()
);
insert into outbox_identity default values;
comment on table outbox_identity is
  'The outbox''s id (one row): the relay writes it into every event as metadata.outboxId, and consumers keep one chain per outbox and aggregate';

alter table inbox_aggregate add column outbox_id uuid;
comment on column inbox_aggregate.outbox_id is
  'The outbox that numbers this chain (metadata.outboxId), NULL when no event named one yet (rows of releases before migration 031)';
alter table inbox_message add column outbox_id uuid;

-- The roles that read the outbox table today (the relay role, roles of your own) may read its id
-- at once, before the next `outbox migrate --roles`; the roles that update a chain's position
-- (outbox_consumer, each consumer's own role, roles of your own) may record its outbox.
do $do$
declare
  g record;
begin
  for g in
    select distinct a.grantee, 'select on outbox_identity' as privilege
    from pg_catalog.pg_class c cross join lateral pg_catalog.aclexplode(c.relacl) a
    where c.oid = 'outbox'::regclass and a.privilege_type = 'SELECT' and a.grantee <> c.relowner
    union
    select distinct a.grantee, 'update (outbox_id) on inbox_aggregate'
    from pg_catalog.pg_attribute t cross join lateral pg_catalog.aclexplode(t.attacl) a
    where t.attrelid = 'inbox_aggregate'::regclass and t.attname = 'last_sequence'
      and a.privilege_type = 'UPDATE'
    union
    select distinct a.grantee, 'update (outbox_id) on inbox_aggregate'
    from pg_catalog.pg_class c cross join lateral pg_catalog.aclexplode(c.relacl) a
    where c.oid = 'inbox_aggregate'::regclass and a.privilege_type = 'UPDATE' and a.grantee <> c.relowner
  loop
    execute pg_catalog.format('grant %s to %s', g.privilege,
      case when g.grantee = 0 then 'public'
           else pg_catalog.quote_ident((select r.rolname::text from pg_catalog.pg_roles r where r.oid = g.grantee)) end);
  end loop;
end
$do$;
