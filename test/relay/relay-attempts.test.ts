/**
 * When an attempt is spent (docs/guarantees.md#what-is-promised: "Bounded failure"): the head of an aggregate at
 * claim, a successor claimed with it only when its own round starts. A relay that dies while
 * sending the head must not leave the successors closer to dead-lettering.
 */
import { createServer, type Server, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import type { Envelope } from '../../shared/platform/envelope.ts';
import { enqueueMany } from '../../shared/producer/index.ts';
import { Lease, type LeaseLeftover } from '../../shared/relay/lease.ts';
import { relayOnce } from '../../shared/relay/loop.ts';
import { abandonLease, claimBatch, startRound } from '../../shared/relay/sql/index.ts';
import { cliEnv, collect, runCli, startCli } from '../support/cli.ts';
import { useHarness } from '../support/harness.ts';
import { claimOptions, testClient, testSettings } from '../support/relay.ts';

const h = useHarness({ max: 4 });

/** A PutEvents endpoint that accepts connections and never answers, as a bus stuck mid-request. */
async function startSilentEndpoint(): Promise<{ url: string; close: () => Promise<void> }> {
  const sockets = new Set<Socket>();
  const server: Server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => {});
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  return {
    url: `http://127.0.0.1:${port}`,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

let silent: Awaited<ReturnType<typeof startSilentEndpoint>> | undefined;
afterEach(async () => {
  await silent?.close();
  silent = undefined;
});

const rows = () =>
  h.db.sql<
    { sequence: string; attempts: number; dead: boolean; leased: boolean; last_error: string | null }[]
  >`
    select sequence, attempts, dead_lettered_at is not null as dead,
           lease_expires_at > now() as leased, last_error
    from outbox order by sequence`;

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

describe('attempts', () => {
  it('are spent by the claim on heads only, and by a started round on successors', async () => {
    await seed('a', 3);
    await seed('b', 1);
    const token = crypto.randomUUID();
    const claimed = await claimBatch(h.db.sql, claimOptions(token));
    expect(claimed.map((e) => [e.aggregateId, e.sequence, e.isHead, e.attempts])).toEqual([
      ['a', '1', true, 1],
      ['a', '2', false, 0],
      ['a', '3', false, 0],
      ['b', '1', true, 1],
    ]);
    const a2 = claimed[1]?.id as string;
    const started = await startRound(h.db.sql, token, [a2]);
    expect([...started]).toEqual([[a2, 1]]);
    // Another lease starts nothing on rows it does not hold.
    expect((await startRound(h.db.sql, crypto.randomUUID(), [a2])).size).toBe(0);
  });

  it('a failed pass gives each row it held the attempts it had before its lease', async () => {
    await seed('a', 3);
    await seed('b', 2);
    const lease = new Lease(30);
    const claimed = await claimBatch(h.db.sql, claimOptions(lease.token));
    lease.claimed(claimed);
    // a#2's round started (its attempt spent) before the pass failed
    await startRound(h.db.sql, lease.token, [claimed[1]?.id as string]);
    expect(await abandonLease(h.db.sql, lease.token, lease.leftover as LeaseLeftover)).toHaveProperty(
      'size',
      5,
    );
    const state = await h.db.sql<{ attempts: number; leased: boolean }[]>`
      select attempts, lease_token is not null as leased from outbox order by id`;
    expect(state).toEqual(Array.from({ length: 5 }, () => ({ attempts: 0, leased: false })));
  });

  it('dead-letters a successor started more often than allowed instead of sending it', async () => {
    await seed('a', 3);
    // As if the second event had been started twice as a successor, each time without an outcome.
    await h.db.sql`update outbox set attempts = 2 where sequence = 2`;
    const deps = { sql: h.db.sql, client: testClient(h.bus.url), settings: testSettings({ maxAttempts: 2 }) };
    expect(await relayOnce(deps)).toMatchObject({ published: 1, deadLettered: 1, released: 1 });
    // `continue`: the third goes on in the next pass.
    expect(await relayOnce(deps)).toMatchObject({ published: 1 });
    expect(h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.sequence)).toEqual([1, 3]);
    const [second] = await h.db.sql<{ dead: boolean; attempts: number; last_error: string }[]>`
      select dead_lettered_at is not null as dead, attempts, last_error from outbox where sequence = 2`;
    expect(second).toMatchObject({ dead: true, attempts: 3 });
    expect(second?.last_error).toMatch(/^AttemptsExhausted: claimed 3 times \(max 2\)/);
  });

  it('are not spent on successors when the relay dies while sending the head: only the head is dead-lettered', async () => {
    await h.db.sql.begin((tx) =>
      enqueueMany(
        tx,
        [1, 2, 3, 4, 5].map((n) => ({
          type: 'OrderChanged',
          source: 'shop.orders',
          aggregateType: 'order',
          aggregateId: 'o-1',
          payload: { n },
        })),
      ),
    );
    silent = await startSilentEndpoint();
    const settings = {
      OUTBOX_PER_AGGREGATE_LIMIT: '3',
      OUTBOX_MAX_ATTEMPTS: '3',
      OUTBOX_LEASE_SECONDS: '5',
    };
    // Four runs, each SIGKILLed once its rows are leased (while PutEvents waits on the silent
    // endpoint); between runs the lease is moved into the past instead of waiting 5 s for it.
    for (let run = 1; run <= 4; run++) {
      const child = startCli(['relay', '--once'], {
        env: cliEnv(h, { ...settings, AWS_ENDPOINT_URL_EVENTBRIDGE: silent.url }),
      });
      const done = collect(child);
      let exited = false;
      void done.then(() => {
        exited = true;
      });
      const started = Date.now();
      // The fourth run finds the head over its attempts: it dead-letters it and exits on its own.
      while (!exited && !(await rows()).some((r) => r.leased)) {
        if (Date.now() - started > 20_000) throw new Error(`run ${run}: no row was leased within 20 s`);
        await new Promise((r) => setTimeout(r, 20));
      }
      child.kill('SIGKILL');
      await done;
      await h.db
        .sql`update outbox set lease_expires_at = now() - interval '1 second' where lease_token is not null`;
    }
    const healthy = await runCli(['relay', '--until-empty'], { env: cliEnv(h, settings) });
    expect(healthy.code).toBe(0);

    const onBus = h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.sequence);
    expect(onBus).toEqual([2, 3, 4, 5]);
    const after = await rows();
    expect(after.map((r) => [r.sequence, r.dead])).toEqual([
      ['1', true],
      ['2', false],
      ['3', false],
      ['4', false],
      ['5', false],
    ]);
    // Claimed a fourth time by the fourth run, which dead-letters it unless the kill came first
    // (then the healthy run's claim is the fifth).
    expect(after[0]?.last_error).toMatch(/^AttemptsExhausted: claimed [45] times \(max 3\)/);
    // Each successor spent exactly the one attempt of its own (successful) publication.
    expect(after.slice(1).map((r) => r.attempts)).toEqual([1, 1, 1, 1]);
  }, 90_000);
});
