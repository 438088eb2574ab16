/**
 * The idempotency window: a key is remembered for its own retention, not only as long as its
 * event's outbox row exists, so pruning published rows does not reopen the key.
 */
import { describe, expect, it } from 'vitest';
import { connect, loadMonitorSettings } from '../../shared/platform/index.ts';
import { enqueue, OutboxConflictError, type OutboxEvent } from '../../shared/producer/index.ts';
import { runRelay } from '../../shared/relay/index.ts';
import { prune } from '../../shared/relay/operations/index.ts';
import { useHarness } from '../support/harness.ts';
import { testClient, testSettings } from '../support/relay.ts';

const h = useHarness();
const DAY = 86_400;

const event = (idempotencyKey: string): OutboxEvent => ({
  type: 'PaymentCaptured',
  source: 'shop.payments',
  aggregateType: 'payment',
  aggregateId: 'p-1',
  payload: { amount: 12 },
  idempotencyKey,
});

const outboxRows = async () =>
  Number((await h.db.sql<{ n: string }[]>`select count(*) as n from outbox`)[0]?.n);

async function publishAll(): Promise<number> {
  const result = await runRelay({
    sql: h.db.sql,
    client: testClient(h.bus.url),
    settings: testSettings(),
    untilEmpty: true,
  });
  return result.published;
}

describe('idempotency window', () => {
  it('still treats a key as a duplicate after its published row was pruned', async () => {
    const first = await h.db.sql.begin((tx) => enqueue(tx, event('capture-K')));
    expect(await publishAll()).toBe(1);
    // The row is published; a short published-row retention prunes it.
    await h.db.sql`update outbox set published_at = now() - interval '2 days'`;
    const pruned = await prune(h.db.sql, {
      publishedRetentionSeconds: DAY,
      deadLetterRetentionSeconds: 30 * DAY,
      batchSize: 100,
      timeBudgetMs: 10_000,
    });
    expect(pruned.publishedDeleted).toBe(1);
    expect(await outboxRows()).toBe(0);

    const again = await h.db.sql.begin((tx) => enqueue(tx, event('capture-K')));
    expect(again).toEqual({ ...first, duplicate: true });
    expect(await outboxRows()).toBe(0);
    expect(await publishAll()).toBe(0);
    expect(h.bus.events).toHaveLength(1);
  });

  it('forgets a key after its own retention once its event has left the outbox, and then enqueues anew', async () => {
    const first = await h.db.sql.begin((tx) => enqueue(tx, event('refund-R')));
    expect(await publishAll()).toBe(1);
    await h.db.sql`update outbox set published_at = now() - interval '10 days'`;
    await h.db.sql`update outbox_idempotency_key set created_at = now() - interval '40 days'`;
    const options = {
      publishedRetentionSeconds: 7 * DAY,
      deadLetterRetentionSeconds: 30 * DAY,
      idempotencyKeyRetentionSeconds: 30 * DAY,
      batchSize: 100,
      timeBudgetMs: 10_000,
    };
    const dryRun = await prune(h.db.sql, { ...options, dryRun: true });
    expect(dryRun).toMatchObject({ publishedDeleted: 1, idempotencyKeysDeleted: 1 });
    const pruned = await prune(h.db.sql, options);
    expect(pruned).toMatchObject({ publishedDeleted: 1, idempotencyKeysDeleted: 1 });
    const keys = await h.db.sql`select idempotency_key from outbox_idempotency_key`;
    expect(keys).toHaveLength(0);

    const again = await h.db.sql.begin((tx) => enqueue(tx, event('refund-R')));
    expect(again.duplicate).toBe(false);
    expect(again.eventId).not.toBe(first.eventId);
    expect(again.sequence).toBe(String(BigInt(first.sequence) + 1n));
    expect(await outboxRows()).toBe(1);
  });

  it('keeps a key past its retention while its event is still in the outbox (pending or dead-lettered)', async () => {
    await h.db.sql.begin((tx) => enqueue(tx, event('pending-P')));
    await h.db.sql.begin((tx) => enqueue(tx, event('dead-D')));
    await h.db.sql`update outbox set dead_lettered_at = now() where idempotency_key = 'dead-D'`;
    await h.db.sql`update outbox_idempotency_key set created_at = now() - interval '400 days'`;
    const options = {
      publishedRetentionSeconds: 7 * DAY,
      deadLetterRetentionSeconds: 30 * DAY,
      idempotencyKeyRetentionSeconds: 30 * DAY,
      batchSize: 100,
      timeBudgetMs: 10_000,
    };
    expect((await prune(h.db.sql, { ...options, dryRun: true })).idempotencyKeysDeleted).toBe(0);
    const pruned = await prune(h.db.sql, options);
    expect(pruned.idempotencyKeysDeleted).toBe(0);
    const repeats = await h.db.sql.begin((tx) =>
      Promise.all([enqueue(tx, event('pending-P')), enqueue(tx, event('dead-D'))]),
    );
    expect(repeats.map((r) => r.duplicate)).toEqual([true, true]);
    expect(await outboxRows()).toBe(2);
  });

  it('under REPEATABLE READ, a key committed after the snapshot is a typed, retryable conflict, and the retry returns the duplicate', async () => {
    const key = `rr-${Date.now()}`;
    const event = (id: string) => ({
      type: 'T',
      source: 'shop.orders',
      aggregateType: 'order',
      aggregateId: id,
      payload: {},
      idempotencyKey: key,
    });
    const a = connect({ url: h.db.url, max: 1, env: {} });
    const b = connect({ url: h.db.url, max: 1, env: {} });
    try {
      let release = () => {};
      const held = new Promise<void>((r) => {
        release = r;
      });
      let enqueued = () => {};
      const first = new Promise<void>((r) => {
        enqueued = r;
      });
      const committing = a.begin(async (tx) => {
        await enqueue(tx, event('rr-1'));
        enqueued();
        await held;
      });
      await first;
      const second = b
        .begin('isolation level repeatable read', async (tx) => {
          await tx`select 1`; // the snapshot is taken here, before the first producer commits
          setTimeout(release, 200);
          return enqueue(tx, event('rr-2'));
        })
        .catch((e: unknown) => e);
      await committing;
      const error = await second;
      expect(error).toBeInstanceOf(OutboxConflictError);
      expect(error).toMatchObject({ retryable: true, sqlState: '40001' });
      const retried = await b.begin('isolation level repeatable read', (tx) => enqueue(tx, event('rr-2')));
      expect(retried).toMatchObject({ duplicate: true, aggregateId: 'rr-1' });
    } finally {
      await a.end();
      await b.end();
    }
  });

  it('remembers keys for 30 days by default, longer than the 7 days published rows are kept', () => {
    const settings = loadMonitorSettings({});
    expect(settings.idempotencyKeyRetentionSeconds).toBe(30 * DAY);
    expect(settings.idempotencyKeyRetentionSeconds).toBeGreaterThan(settings.publishedRetentionSeconds);
    expect(
      loadMonitorSettings({ OUTBOX_IDEMPOTENCY_RETENTION_DAYS: '90' }).idempotencyKeyRetentionSeconds,
    ).toBe(90 * DAY);
    expect(() => loadMonitorSettings({ OUTBOX_IDEMPOTENCY_RETENTION_DAYS: 'forever' })).toThrow(
      /OUTBOX_IDEMPOTENCY_RETENTION_DAYS/,
    );
  });
});
