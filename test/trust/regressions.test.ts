/**
 * Issue 43's reproductions, each against the real roles (`ensureRoles`) of a migrated database.
 * A plant is a function a producer creates in a schema the privileged sessions search; it appends
 * `<plant>@<current_user>` to a log table anyone may insert into, then answers as the built-in
 * would, so a statement that resolves to it succeeds and only the log shows that it ran.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect, OUTBOX_SEARCH_PATH, type Sql } from '../../shared/platform/index.ts';
import { enqueue, type OutboxEvent } from '../../shared/producer/index.ts';
import { recordFailures, releaseUnsent } from '../../shared/relay/sql/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { createTestRoles, type TestRoles } from '../support/roles.ts';

let db: TestDatabase;
let testRoles: TestRoles;
let producer: Sql;
let relay: Sql;
/** A second service's producer: a login role of its own, member of the producer role. */
let otherProducer: Sql;

beforeAll(async () => {
  db = await createTestDatabase({ searchPath: OUTBOX_SEARCH_PATH });
  testRoles = await createTestRoles(db);
  const role = testRoles.roles.producer;
  // The threat model: a producer whose own tables live in a schema the privileged sessions search.
  await db.sql.unsafe(`grant create on schema public to "${role}"`);
  producer = testRoles.connectAs(role);
  relay = testRoles.connectAs(testRoles.roles.relay);
  const other = `${role}_other`;
  await db.sql.unsafe(`create role "${other}" login in role "${role}"`);
  const url = new URL(testRoles.urlOf(role));
  await db.sql.unsafe(`alter role "${other}" password '${decodeURIComponent(url.password)}'`);
  url.username = other;
  otherProducer = connect({ url: url.toString(), max: 2, env: {} });
  await producer.unsafe(`create table public.plant_log (entry text not null)`);
  await producer.unsafe(`grant insert on public.plant_log to public`);
});
afterAll(async () => {
  await otherProducer?.end({ timeout: 1 });
  await db?.sql.unsafe(
    `drop owned by "${testRoles?.roles.producer}_other"; drop role if exists "${testRoles?.roles.producer}_other"`,
  );
  await testRoles?.drop();
  await db?.drop();
});

/** The plants that ran, as `<plant>@<role>`, and the log emptied. */
async function plantsRan(): Promise<string[]> {
  const rows = await db.sql<{ entry: string }[]>`delete from public.plant_log returning entry`;
  return rows.map((r) => r.entry).sort();
}

/** Enqueues one event as the producer and leases it to `leaseToken`, as a claim would; its row id. */
async function leasedEvent(aggregateId: string, leaseToken: string): Promise<string> {
  const result = await producer.begin((tx) =>
    enqueue(tx, { type: 'T', source: 'test.trust', aggregateType: 'a', aggregateId, payload: {} }),
  );
  const [row] = await db.sql<{ id: string }[]>`update outbox set lease_token = ${leaseToken}::uuid,
    lease_expires_at = now() + interval '1 minute', attempts = 1
    where event_id = ${result.eventId}::uuid returning id::text`;
  if (!row) throw new Error(`no row for ${result.eventId}`);
  return row.id;
}

describe('issue 43, item 2: the relay divides with operators pg_catalog has exactly', () => {
  it('records failures and releases unsent rows without running a planted bigint / numeric', async () => {
    await producer.unsafe(`
      create function public.plant_div(bigint, numeric) returns numeric language plpgsql as $$
      begin
        insert into public.plant_log values ('bigint/numeric@' || current_user);
        return pg_catalog.numeric_div($1::numeric, $2);
      end $$;
      create operator public./ (leftarg = bigint, rightarg = numeric, function = public.plant_div)`);
    try {
      const lease = randomUUID();
      const failed = await leasedEvent('div-1', lease);
      const unsent = await leasedEvent('div-2', lease);
      const recorded = await recordFailures(relay, lease, [
        { id: failed, error: 'X: bus down', deadLetter: false, retryInMs: 1500, giveBackAttempt: true },
      ]);
      const released = await releaseUnsent(relay, lease, [
        { id: unsent, notBeforeMs: 2500, giveBackAttempt: false },
      ]);
      expect([...recorded]).toEqual([failed]);
      expect(released).toBe(1);
      expect(await plantsRan()).toEqual([]);
      // The backoffs were applied on the database clock, in seconds (1.5 s and 2.5 s from now).
      const rows = await db.sql<{ id: string; wait: number }[]>`
        select id::text, ceil(extract(epoch from available_at - now()))::int as wait from outbox
        where id in (${failed}, ${unsent}) order by id`;
      expect(rows.map((r) => r.wait)).toEqual([2, 3]);
    } finally {
      await db.sql.unsafe(
        `drop operator public./ (bigint, numeric); drop function public.plant_div(bigint, numeric)`,
      );
    }
  });
});

describe('issue 43, item 4: an idempotency key answers for its own producer and source only', () => {
  const payment = (idempotencyKey: string, source = 'test.payments'): OutboxEvent => ({
    type: 'PaymentCaptured',
    source,
    aggregateType: 'card',
    aggregateId: '4111-xxxx',
    payload: { amount: 991 },
    idempotencyKey,
  });
  const probe = (idempotencyKey: string, source: string): OutboxEvent => ({
    type: 'Probe',
    source,
    aggregateType: 'probe',
    aggregateId: 'p-1',
    payload: {},
    idempotencyKey,
  });

  it("returns nothing of another producer's event through its key, and its key suppresses nothing", async () => {
    const real = await producer.begin((tx) => enqueue(tx, payment('payment-991-captured')));
    // Another role, with its own source and with the victim's: a fresh event of its own each time.
    const read = await otherProducer.begin((tx) =>
      enqueue(tx, probe('payment-991-captured', 'test.attacker')),
    );
    const spoofed = await otherProducer.begin((tx) =>
      enqueue(tx, probe('payment-991-captured', 'test.payments')),
    );
    // The same role (services sharing the producer role), another source: fresh as well.
    const shared = await producer.begin((tx) => enqueue(tx, probe('payment-991-captured', 'test.shop')));
    for (const r of [read, spoofed, shared]) {
      expect(r).toMatchObject({ aggregateType: 'probe', aggregateId: 'p-1', duplicate: false });
      expect(r.eventId).not.toBe(real.eventId);
    }
    // A key taken first by another producer, even under the victim's source, suppresses nothing.
    await otherProducer.begin((tx) => enqueue(tx, probe('refund-7', 'test.payments')));
    const later = await producer.begin((tx) => enqueue(tx, payment('refund-7')));
    expect(later).toMatchObject({ aggregateType: 'card', aggregateId: '4111-xxxx', duplicate: false });
    // The key still deduplicates its own producer's repeat.
    const again = await producer.begin((tx) => enqueue(tx, payment('payment-991-captured')));
    expect(again).toMatchObject({ eventId: real.eventId, sequence: real.sequence, duplicate: true });
    const stored = await db.sql<{ n: number }[]>`
      select count(*)::int as n from outbox where event_id = ${later.eventId}::uuid and event_type = 'PaymentCaptured'`;
    expect(stored[0]?.n).toBe(1);
    expect(await plantsRan()).toEqual([]);
  });
});
