import { randomBytes } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureRoles } from '../shared/operations/roles.ts';
import type { OutboxRoles } from '../shared/platform/names.ts';
import { createTestDatabase, type TestDatabase } from './support/db.ts';

let db: TestDatabase;
let roles: OutboxRoles;
beforeAll(async () => {
  db = await createTestDatabase();
  const suffix = randomBytes(4).toString('hex');
  roles = { relay: `relay_${suffix}`, monitor: `monitor_${suffix}`, producer: `producer_${suffix}` };
  await ensureRoles(db.sql, roles, 7_000);
  await ensureRoles(db.sql, roles, 7_000); // idempotent: a second deploy changes nothing
});
afterAll(async () => {
  for (const r of Object.values(roles ?? {})) {
    await db.sql.unsafe(`drop owned by "${r}"; drop role if exists "${r}"`).catch(() => {});
  }
  await db?.drop();
});

/** Runs `statement` as `role` and returns the SQLSTATE it failed with, or 'ok'. */
async function as(role: string, statement: string): Promise<string> {
  try {
    await db.sql.begin(async (tx) => {
      await tx.unsafe(`set local role "${role}"`);
      await tx.unsafe(statement);
      throw new Error('rollback');
    });
  } catch (error) {
    const code = (error as { code?: string }).code;
    return code ?? 'ok';
  }
  return 'ok';
}

describe('database roles', () => {
  it('lets the relay read and update the outbox and nothing else', async () => {
    expect(await as(roles.relay, 'select count(*) from outbox')).toBe('ok');
    expect(await as(roles.relay, "update outbox set last_error = 'x' where false")).toBe('ok');
    expect(await as(roles.relay, 'delete from outbox where false')).toBe('42501');
    expect(
      await as(
        roles.relay,
        "insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload) values ('a','b',1,'t','s','{}')",
      ),
    ).toBe('42501');
    expect(await as(roles.relay, 'select * from outbox_aggregate')).toBe('42501');
  });

  it('lets the monitor read and delete, and the producer insert events and bump sequences', async () => {
    expect(await as(roles.monitor, 'delete from outbox where false')).toBe('ok');
    expect(await as(roles.monitor, "update outbox set last_error = 'x' where false")).toBe('42501');
    expect(
      await as(
        roles.producer,
        "insert into outbox (aggregate_type, aggregate_id, sequence, event_type, source, payload) values ('a','b',1,'t','s','{}')",
      ),
    ).toBe('ok');
    expect(
      await as(
        roles.producer,
        "insert into outbox_aggregate values ('a','b',1) on conflict (aggregate_type, aggregate_id) do update set last_sequence = outbox_aggregate.last_sequence + 1",
      ),
    ).toBe('ok');
    expect(await as(roles.producer, 'delete from outbox where false')).toBe('42501');
  });

  it('sets the statement timeout on the role, so clients need no SET (which pins RDS Proxy sessions)', async () => {
    const [row] = await db.sql<{ setconfig: string[] }[]>`
      select s.setconfig from pg_db_role_setting s join pg_roles r on r.oid = s.setrole where r.rolname = ${roles.relay}`;
    expect(row?.setconfig).toEqual(['statement_timeout=7000ms']);
  });
});
