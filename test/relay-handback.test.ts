/**
 * Issue 31, items 7–10: what a failed pass hands back, and what a pass counts when its lease is
 * lost under it. Each test drives a real pass against the real database and the local bus, and
 * takes the lease away (or loses an answer) at a step where the pass cannot know it yet.
 */
import { describe, expect, it } from 'vitest';
import { enqueueMany } from '../shared/producer/index.ts';
import { Lease } from '../shared/relay/lease.ts';
import { type PassCheckpoint, type RelayDeps, relayPass } from '../shared/relay/pass.ts';
import { claimBatch } from '../shared/relay/sql/index.ts';
import { useHarness } from './support/harness.ts';
import { claimOptions, testClient, testSettings } from './support/relay.ts';

const h = useHarness({ max: 6 });

const seed = (aggregateId: string, n: number) =>
  h.db.sql.begin((tx) =>
    enqueueMany(
      tx,
      Array.from({ length: n }, (_, i) => ({
        type: 'OrderChanged',
        source: 'shop.orders',
        aggregateType: 'order',
        aggregateId,
        payload: { n: i + 1 },
      })),
    ),
  );

const rowOf = async (aggregateId: string, sequence: number) => {
  const [row] = await h.db.sql<{ id: string; attempts: number; leased: boolean; dead: boolean }[]>`
    select id, attempts, lease_token is not null as leased, dead_lettered_at is not null as dead
    from outbox where aggregate_id = ${aggregateId} and sequence = ${sequence}`;
  if (!row) throw new Error(`no row ${aggregateId}#${sequence}`);
  return row;
};

/** Another relay takes `id` over: its lease is run out, and a claim of another relay leases it. */
async function takeOver(id: string): Promise<void> {
  await h.db.sql`update outbox set lease_expires_at = now() - interval '1 second' where id = ${id}`;
  const claimed = await claimBatch(h.db.sql, claimOptions(crypto.randomUUID()));
  expect(claimed.map((e) => e.id)).toContain(id);
}

/** A pass of its own lease whose checkpoint runs `at` once the pass reaches `when` for the `nth` time. */
function passWith(deps: RelayDeps, when: PassCheckpoint, nth: number, at: () => Promise<void>) {
  const lease = new Lease(30);
  let seen = 0;
  const counts = relayPass(deps, lease, {
    checkpoint: async (step) => {
      if (step === when && ++seen === nth) await at();
    },
  });
  return { lease, counts };
}

describe('counts when the lease is lost before the outcome is written (item 10)', () => {
  it('does not count as dead-lettered a successor exhausted at round start whose row another relay took', async () => {
    await seed('a', 2);
    const a2 = await rowOf('a', 2);
    // started twice as a successor before, each time without an outcome
    await h.db.sql`update outbox set attempts = 2 where id = ${a2.id}`;
    const deps = { sql: h.db.sql, client: testClient(h.bus.url), settings: testSettings({ maxAttempts: 2 }) };
    // round 2 starts a#2 (3 > 2: dead-lettered instead of sent); before that is written, another
    // relay takes a#2 over
    const { counts } = passWith(deps, 'sent', 2, () => takeOver(a2.id));
    expect(await counts).toMatchObject({ published: 1, deadLettered: 0, leaseLost: 1 });
    expect(await rowOf('a', 2)).toMatchObject({ dead: false, leased: true });
  });

  it('counts a retry recorded beside a dead letter whose lease was lost as retried, the dead letter as neither', async () => {
    await seed('a', 1);
    await seed('b', 1);
    const b1 = await rowOf('b', 1);
    // b#1 spends its last attempt at this claim: its retryable failure dead-letters it
    await h.db.sql`update outbox set attempts = 2 where id = ${b1.id}`;
    h.bus.setFaults({ poisonMarker: '"aggregateType":"order"', poisonCode: 'InternalFailure' });
    const deps = {
      sql: h.db.sql,
      client: testClient(h.bus.url, { maxAttempts: 1 }),
      settings: testSettings({ maxAttempts: 3 }),
    };
    const { counts } = passWith(deps, 'sent', 1, () => takeOver(b1.id));
    expect(await counts).toMatchObject({ retried: 1, deadLettered: 0, leaseLost: 1 });
    expect(await rowOf('a', 1)).toMatchObject({ attempts: 1, leased: false, dead: false });
    expect(await rowOf('b', 1)).toMatchObject({ dead: false, leased: true });
  });
});
