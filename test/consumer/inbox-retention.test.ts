/**
 * Replays across time (issue 45, part B; docs/inbox-order.md#every-situation-in-every-mode): events applied, their records
 * pruned once older than the retention, then delivered again (a Custom Event Bus replay of its
 * archive, a replay from a queue or the on-failure destination) are not applied a second time in
 * any order mode: `stale`, with the reason, counted. A bus replay below its chain's position is not
 * applied `late` either, however young.
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { type InboxOptions, InboxOptionsError, inbox } from '../../shared/consumer/index.ts';
import { pruneInbox } from '../../shared/consumer/operations/inbox-maintenance.ts';
import { EnvVar } from '../../shared/platform/names.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase({ max: 6 });
  await db.sql`create table applied (event_id text not null, sequence int not null)`;
});
afterAll(async () => {
  await db?.drop();
});
beforeEach(async () => {
  await db.sql`truncate inbox_message, inbox_aggregate, inbox_gap, inbox_failed, applied`;
});

const DAY_MS = 86_400_000;
const TYPES = ['OrderPlaced', 'OrderPaid'];

/**
 * Event #n of one aggregate as delivered when it is `ageDays` old: the same event (id, numbers)
 * at any age, so that a delivery days later is built by asking for it older.
 */
function outboxEvent(id: string, n: number, ageDays: number): EventBridgeEvent<string, unknown> {
  const at = new Date(Date.now() - ageDays * DAY_MS).toISOString();
  return delivery({
    detailType: TYPES[(n - 1) % 2] as string,
    metadata: {
      eventId: id,
      aggregateId: 'o-1',
      sequence: n,
      typeSequence: Math.ceil(n / 2),
      occurredAt: at,
    },
    time: at.replace(/\.\d{3}Z$/, 'Z'),
  }) as EventBridgeEvent<string, unknown>;
}

/** A Custom Event Bus replay of `event` (a WITH_METADATA subscriber of a POINT_IN_TIME replay). */
const busReplay = (event: EventBridgeEvent<string, unknown>) => ({
  Data: event,
  SystemMetadata: {
    ContentType: 'application/eventbridge+json',
    'aws:EventId': randomUUID(),
    'aws:IngestionTime': event.time,
    'aws:SequenceNumber': '1',
    'aws:DeliveryType': 'REPLAY',
    EventGroupId: 'order/o-1',
  },
});

function consumer(options: Partial<InboxOptions<Record<string, unknown>>>) {
  const metrics: Record<string, unknown>[] = [];
  const handler = inbox(
    {
      sql: db.sql,
      consumer: 'ledger',
      metrics: { write: (line) => metrics.push(JSON.parse(line)) },
      ...options,
    },
    async (_event, { inbox: i }) => {
      await i.tx`insert into applied values (${i.metadata.eventId}, ${Number(i.metadata.sequence)})`;
      return 'applied';
    },
  );
  const deliver = (event: Parameters<typeof handler>[0]) =>
    handler(event, lambdaContext()).then((r) => (typeof r === 'string' ? r : (r as { inbox: string }).inbox));
  return { deliver, stale: () => metrics.filter((m) => 'InboxStale' in m).length };
}

const MODES: { name: string; options: Partial<InboxOptions<Record<string, unknown>>> }[] = [
  { name: 'none', options: { order: 'none' } },
  { name: 'ignore-stale', options: { order: 'ignore-stale' } },
  { name: 'wait-for-gap, process', options: { order: 'wait-for-gap', onGapTimeout: 'process' } },
  { name: 'wait-for-gap, park', options: { order: 'wait-for-gap', onGapTimeout: 'park' } },
  {
    name: 'wait-for-gap, park, types',
    options: { order: 'wait-for-gap', onGapTimeout: 'park', types: TYPES },
  },
];

/** Prunes as the monitor does, after the records have aged past the retention (back-dated). */
async function pruneAfterRetention() {
  await db.sql`update inbox_message set processed_at = processed_at - interval '31 days'`;
  const pruned = await pruneInbox(db.sql, {
    retentionSeconds: 30 * 86_400,
    batchSize: 1_000,
    timeBudgetMs: 10_000,
  });
  expect(await db.sql`select event_id from inbox_message`, 'the records are pruned').toEqual([]);
  return pruned;
}

describe('replays across time: applied #1–#3, records pruned, then delivered again', () => {
  for (const mode of MODES) {
    for (const how of ['a bus replay', 'a redelivery (queue or on-failure destination replay)'] as const) {
      it(`${mode.name}, ${how}, in any order: 0 applied again, each stale with its reason, counted`, async () => {
        const c = consumer(mode.options);
        const ids = [randomUUID(), randomUUID(), randomUUID()];
        // Applied when 20 days old (within the 30 days' retention)…
        for (const [i, id] of ids.entries())
          expect(await c.deliver(outboxEvent(id, i + 1, 20))).toBe('applied');
        await pruneAfterRetention();
        // …delivered again 15 days later, 35 days old: #2, #3, #1.
        const answers = [];
        for (const n of [2, 3, 1]) {
          const event = outboxEvent(ids[n - 1] as string, n, 35);
          answers.push(await c.deliver(how === 'a bus replay' ? busReplay(event) : event));
        }
        expect(answers).toEqual(['stale', 'stale', 'stale']);
        expect(await db.sql`select count(*)::int as n from applied`).toEqual([{ n: 3 }]);
        const records = await db.sql<{ outcome: string; reason: string }[]>`
          select outcome, reason from inbox_message order by sequence`;
        expect(records.map((r) => r.outcome)).toEqual(['stale', 'stale', 'stale']);
        for (const r of records) expect(r.reason).toMatch(/^beyond-retention: .*retentionDays 30/);
        expect(c.stale()).toBe(3);
        expect(await db.sql`select * from inbox_gap`).toEqual([]);
      });
    }
  }

  it('a young bus replay below its chain position, with no record, is stale (replay-behind-chain), not late', async () => {
    const c = consumer({ order: 'wait-for-gap', onGapTimeout: 'process' });
    const ids = [randomUUID(), randomUUID(), randomUUID()];
    for (const [i, id] of ids.entries()) await c.deliver(outboxEvent(id, i + 1, 1));
    await db.sql`delete from inbox_message where event_id = ${ids[0] as string}`; // e.g. discarded by hand
    expect(await c.deliver(busReplay(outboxEvent(ids[0] as string, 1, 1)))).toBe('stale');
    const [record] = await db.sql<
      { reason: string }[]
    >`select reason from inbox_message where event_id = ${ids[0] as string}`;
    expect(record?.reason).toMatch(/^replay-behind-chain: /);
    expect(await db.sql`select count(*)::int as n from applied`).toEqual([{ n: 3 }]);
  });

  it('within the retention a redelivery below the chain is still applied late (the on-failure replay)', async () => {
    const c = consumer({ order: 'wait-for-gap', onGapTimeout: 'process', gapWaitSeconds: 0 });
    const [a, b] = [randomUUID(), randomUUID()];
    expect(await c.deliver(outboxEvent(b, 2, 1))).toBe('applied'); // its gap wait is 0: ahead
    expect(await c.deliver(outboxEvent(a, 1, 1))).toBe('applied'); // late
    expect(await db.sql`select count(*)::int as n from applied`).toEqual([{ n: 2 }]);
  });

  it('an event never seen, older than the retention, above its chain: applied (a new consumer backfilling)', async () => {
    const c = consumer({ order: 'ignore-stale' });
    expect(await c.deliver(busReplay(outboxEvent(randomUUID(), 1, 90)))).toBe('applied');
  });

  it('retentionDays and OUTBOX_INBOX_RETENTION_DAYS: read, and refused out of range naming the field', async () => {
    const c = consumer({ order: 'none', retentionDays: 40 });
    expect(await c.deliver(outboxEvent(randomUUID(), 1, 35))).toBe('applied');
    process.env[EnvVar.inboxRetentionDays] = '10';
    try {
      const e = consumer({ order: 'none' });
      expect(await e.deliver(outboxEvent(randomUUID(), 2, 11))).toBe('stale');
      process.env[EnvVar.inboxRetentionDays] = 'soon';
      expect(() => consumer({ order: 'none' })).toThrow(/retentionDays.*OUTBOX_INBOX_RETENTION_DAYS/s);
    } finally {
      delete process.env[EnvVar.inboxRetentionDays];
    }
    expect(() => consumer({ order: 'none', retentionDays: 1 })).toThrow(InboxOptionsError);
    expect(() => consumer({ order: 'none', retentionDays: 1 })).toThrow(/retentionDays/);
  });
});
