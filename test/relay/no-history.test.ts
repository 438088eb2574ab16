/**
 * No published history (`OUTBOX_PUBLISHED_RETENTION_DAYS=0`, issue 37): the relay deletes each row
 * in the statement that would have marked it published. Every guarantee holds without the rows:
 * what reached the bus is counted there; order per aggregate, the lease token's guard, the
 * idempotency window, dead letters and their replay, status and the role's privilege are checked
 * against the database.
 */
import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import {
  type EnvelopeMetadata,
  loadMonitorSettings,
  loadRelaySettings,
  OutboxConfigError,
} from '../../shared/platform/index.ts';
import { enqueue, enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';
import { createRelay, runRelay } from '../../shared/relay/index.ts';
import { findDeadLetterIds, getStatus, replayDeadLetters } from '../../shared/relay/operations/index.ts';
import { claimBatch, markPublished } from '../../shared/relay/sql/index.ts';
import { countOrderViolations } from '../chaos/chaos.ts';
import { useHarness } from '../support/harness.ts';
import { claimOptions, testClient, testSettings } from '../support/relay.ts';
import { createTestRoles } from '../support/roles.ts';

const h = useHarness({ max: 12 });
const noHistory = (overrides: Parameters<typeof testSettings>[0] = {}) =>
  testSettings({ publishedRetentionDays: 0, ...overrides });

const order = (aggregateId: string, payload: Record<string, unknown> = { total: 1 }): OutboxEvent => ({
  type: 'OrderPlaced',
  source: 'shop.orders',
  aggregateType: 'order',
  aggregateId,
  payload,
});

const rowCount = async () =>
  Number((await h.db.sql<{ n: string }[]>`select count(*) as n from outbox`)[0]?.n);
const eventIds = () => h.bus.events.map((e) => (e.detail.metadata as { eventId: string }).eventId);

describe('no published history (OUTBOX_PUBLISHED_RETENTION_DAYS=0)', () => {
  it('is read by the relay, the monitor and the CLI alike; a negative retention is refused naming the variable', () => {
    const env = { EVENT_BUS_NAME: 'b', OUTBOX_PUBLISHED_RETENTION_DAYS: '0' };
    expect(loadRelaySettings(env).publishedRetentionDays).toBe(0);
    expect(loadMonitorSettings(env).publishedRetentionSeconds).toBe(0);
    expect(loadRelaySettings({ EVENT_BUS_NAME: 'b' }).publishedRetentionDays).toBe(7);
    expect(() => loadRelaySettings({ ...env, OUTBOX_PUBLISHED_RETENTION_DAYS: '-1' })).toThrow(
      new OutboxConfigError(
        'OUTBOX_PUBLISHED_RETENTION_DAYS',
        'must be a number from 0 to 3650 (days; 0 keeps no published history) (got "-1"); unset it to use the default, 7',
      ),
    );
  });

  it('publishes every event once, in order per aggregate, through faults, and leaves no published row', async () => {
    const events = Array.from({ length: 300 }, (_, i) => order(String(i % 20), { i }));
    for (let i = 0; i < events.length; i += 50) {
      await h.db.sql.begin((tx) => enqueueMany(tx, events.slice(i, i + 50)));
    }
    h.bus.setFaults({ entryFailureRate: 0.1, throttleRate: 0.05, lostResponseRate: 0.05 });
    const result = await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url, { maxAttempts: 1 }),
      settings: noHistory({ maxAttempts: 50 }),
      untilEmpty: true,
    });
    expect(result.published).toBe(300);
    expect(new Set(eventIds()).size).toBe(300);
    expect(countOrderViolations(h.bus.events.map((e) => e.detail.metadata as EnvelopeMetadata))).toBe(0);
    expect(await rowCount()).toBe(0);
    // The aggregates' counters stay: the next event of an aggregate takes the next sequence.
    h.bus.setFaults({});
    h.bus.reset();
    await h.db.sql.begin((tx) => enqueue(tx, order('3')));
    await runRelay({ sql: h.db.sql, client: testClient(h.bus.url), settings: noHistory(), untilEmpty: true });
    expect(h.bus.events.map((e) => (e.detail.metadata as { sequence: number }).sequence)).toEqual([16]);
    expect(await rowCount()).toBe(0);
  });

  it("deletes only the rows its lease still holds: an expired lease's relay deletes nothing of the new owner's", async () => {
    await h.db.sql.begin((tx) => enqueueMany(tx, [order('1'), order('2')]));
    const zombie = randomUUID();
    const claimedByZombie = await claimBatch(h.db.sql, claimOptions(zombie));
    expect(claimedByZombie).toHaveLength(2);
    await h.db.sql`update outbox set lease_expires_at = now() - interval '1 second'`;
    const owner = randomUUID();
    const claimedByOwner = await claimBatch(h.db.sql, claimOptions(owner));
    const ids = claimedByOwner.map((e) => e.id);
    expect(await markPublished(h.db.sql, zombie, ids, 'delete')).toBe(0);
    expect(await rowCount()).toBe(2);
    expect(await markPublished(h.db.sql, owner, ids, 'delete')).toBe(2);
    expect(await rowCount()).toBe(0);
  });

  it('keeps the idempotency window: a repeated key after its row was deleted is a duplicate, not a new event', async () => {
    const first = await h.db.sql.begin((tx) => enqueue(tx, { ...order('7'), idempotencyKey: 'checkout-7' }));
    await runRelay({ sql: h.db.sql, client: testClient(h.bus.url), settings: noHistory(), untilEmpty: true });
    expect(await rowCount()).toBe(0);
    const again = await h.db.sql.begin((tx) => enqueue(tx, { ...order('7'), idempotencyKey: 'checkout-7' }));
    expect(again).toMatchObject({ eventId: first.eventId, duplicate: true });
    await runRelay({ sql: h.db.sql, client: testClient(h.bus.url), settings: noHistory(), untilEmpty: true });
    expect(eventIds()).toEqual([first.eventId]);
  });

  it('keeps dead letters, which status counts and a replay publishes (and then deletes)', async () => {
    await h.db.sql.begin((tx) =>
      enqueueMany(tx, [order('9', { poison: 'POISON' }), order('10'), order('10')]),
    );
    h.bus.setFaults({ poisonMarker: 'POISON' });
    await runRelay({ sql: h.db.sql, client: testClient(h.bus.url), settings: noHistory(), untilEmpty: true });
    expect(h.bus.events).toHaveLength(2);
    expect(await rowCount()).toBe(1);
    const status = await getStatus(h.db.sql);
    expect(status).toMatchObject({ pending: 0, deadLettered: 1, published: 0 });
    h.bus.setFaults({});
    expect(await replayDeadLetters(h.db.sql, await findDeadLetterIds(h.db.sql))).toBe(1);
    await runRelay({ sql: h.db.sql, client: testClient(h.bus.url), settings: noHistory(), untilEmpty: true });
    expect(h.bus.events).toHaveLength(3);
    expect(await rowCount()).toBe(0);
  });

  it('refuses to claim as a role that may not delete rows, naming the variable; the role ensureRoles gives it works', async () => {
    await h.db.sql.begin((tx) => enqueueMany(tx, [order('1'), order('2')]));
    const without = await createTestRoles(h.db);
    const withDelete = await createTestRoles(h.db, { relayDeletesPublished: true });
    try {
      const refused = createRelay({
        sql: without.connectAs(without.roles.relay),
        client: testClient(h.bus.url),
        settings: noHistory(),
      });
      const error = await refused.run({ untilEmpty: true }).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(OutboxConfigError);
      expect((error as OutboxConfigError).variable).toBe('OUTBOX_PUBLISHED_RETENTION_DAYS');
      expect((error as Error).message).toContain(
        `the database user "${without.roles.relay}" may not delete outbox rows`,
      );
      expect(h.bus.events).toHaveLength(0);
      const attempts = await h.db.sql<{ attempts: number }[]>`select attempts from outbox`;
      expect(attempts.map((r) => r.attempts)).toEqual([0, 0]);

      // The same role keeping the history needs no DELETE.
      const keeping = createRelay({
        sql: without.connectAs(without.roles.relay),
        client: testClient(h.bus.url),
        settings: testSettings(),
      });
      expect((await keeping.run({ untilEmpty: true })).published).toBe(2);
      await h.db.sql`update outbox set published_at = null`;
      h.bus.reset();

      const allowed = createRelay({
        sql: withDelete.connectAs(withDelete.roles.relay),
        client: testClient(h.bus.url),
        settings: noHistory(),
      });
      expect((await allowed.run({ untilEmpty: true })).published).toBe(2);
      expect(h.bus.events).toHaveLength(2);
      expect(await rowCount()).toBe(0);
    } finally {
      await without.drop();
      await withDelete.drop();
    }
  });

  it('finds a DELETE revoked from a warm relay before its next run publishes anything (issue 48)', async () => {
    // A manual `outbox migrate --roles` without OUTBOX_PUBLISHED_RETENTION_DAYS=0 revokes the
    // relay role's DELETE. The check was cached for the relay's life: each warm invocation would
    // send a batch, fail its mark with 42501, and send it again the next time.
    const roles = await createTestRoles(h.db, { relayDeletesPublished: true });
    const warm = createRelay({
      sql: roles.connectAs(roles.roles.relay),
      client: testClient(h.bus.url),
      settings: noHistory(),
    });
    try {
      await h.db.sql.begin((tx) => enqueueMany(tx, [order('1'), order('2')]));
      expect((await warm.run({ untilEmpty: true })).published).toBe(2);
      expect(h.bus.events).toHaveLength(2);
      await h.db.sql`revoke delete on outbox from ${h.db.sql(roles.roles.relay)}`;
      await h.db.sql.begin((tx) => enqueueMany(tx, [order('3'), order('4')]));
      for (const next of [() => warm.run({ untilEmpty: true }), () => warm.once()]) {
        const error = await next().catch((e: unknown) => e);
        expect(error).toBeInstanceOf(OutboxConfigError);
        expect((error as OutboxConfigError).variable).toBe('OUTBOX_PUBLISHED_RETENTION_DAYS');
      }
      expect(h.bus.events).toHaveLength(2);
      const rows = await h.db.sql<{ attempts: number; leased: boolean }[]>`
        select attempts, lease_token is not null as leased from outbox order by id`;
      expect(rows).toEqual([
        { attempts: 0, leased: false },
        { attempts: 0, leased: false },
      ]);
    } finally {
      await warm.close();
      await roles.drop();
    }
  });
});
