/**
 * The previous release's relay and monitor beside this one's, on one database (issue 45;
 * CONTRIBUTING.md#migrations). The database is installed by the previous release (its `outbox
 * migrate --roles`), then upgraded by this one's, as a deploy does; both releases' relays and
 * monitors then log in as the deployment's roles (never as the admin) with what each release
 * sends at connect: the release before migration 024 sends no search_path and names every table
 * unqualified, so it finds the moved tables only through the role defaults `--roles` sets.
 *
 * Over a backlog of many aggregates: both relays polling at once; the previous relay crashing
 * mid-batch and this one taking its rows over once the lease ran out (an upgrade), and the reverse
 * (a rollback); each release's monitor pruning and counting beside the other's relay; no published
 * history with both; the previous relay and monitor on a database this release installed; and the
 * previous release's `outbox migrate --roles` run again by a stack rolled back, which must apply
 * nothing or refuse (migration 032), never install a second outbox. Every event reaches the bus
 * at least once (exactly once where nothing fails), each aggregate's deliveries in order, every
 * row is marked (or deleted), and no row is claimed while another lease holds it: a trigger on the
 * outbox records every claim, mark and delete with the session's application_name, so each check
 * says which release did what.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type * as MonitorHandlerModule from '../../functions/monitor/monitor-handler.ts';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import type * as Platform from '../../shared/platform/index.ts';
import type { EnvelopeMetadata } from '../../shared/platform/index.ts';
import { enqueueMany } from '../../shared/producer/index.ts';
import type * as RelayIndex from '../../shared/relay/index.ts';
import type * as LeaseModule from '../../shared/relay/lease.ts';
import type * as Operations from '../../shared/relay/operations/index.ts';
import type * as PassModule from '../../shared/relay/pass.ts';
import { createEmptyDatabase, type EmptyDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';
import { previousRelayReleases, previousRelease } from '../support/previous-release.ts';

const ROOT = join(import.meta.dirname, '../..');

/** Monitors' EMF lines and logs are not what is checked here: stdout is muted while any runs. */
let muted = 0;
const write = process.stdout.write;
function quiet(change: 1 | -1) {
  muted += change;
  process.stdout.write = muted > 0 ? ((() => true) as typeof process.stdout.write) : write;
}

/** One release's code: what a deploy of it runs. */
interface Release {
  name: 'previous' | 'current';
  platform: typeof Platform;
  relay: typeof RelayIndex;
  operations: typeof Operations;
  Lease: typeof LeaseModule.Lease;
  relayPass: typeof PassModule.relayPass;
  createMonitorHandler: typeof MonitorHandlerModule.createMonitorHandler;
}

async function loadRelease(name: Release['name'], tree: string): Promise<Release> {
  const at = (path: string) => import(join(tree, path));
  return {
    name,
    platform: await at('shared/platform/index.ts'),
    relay: await at('shared/relay/index.ts'),
    operations: await at('shared/relay/operations/index.ts'),
    Lease: (await at('shared/relay/lease.ts')).Lease,
    relayPass: (await at('shared/relay/pass.ts')).relayPass,
    createMonitorHandler: (await at('functions/monitor/monitor-handler.ts')).createMonitorHandler,
  };
}

/** The relay's environment in the tests: short polls and backoffs, small batches. */
const RELAY_ENV = {
  EVENT_BUS_NAME: 'test-bus',
  OUTBOX_BATCH_SIZE: '20',
  OUTBOX_PER_AGGREGATE_LIMIT: '4',
  OUTBOX_LEASE_SECONDS: '8',
  OUTBOX_MAX_ATTEMPTS: '30',
  OUTBOX_BACKOFF_BASE_MS: '10',
  OUTBOX_BACKOFF_MAX_MS: '50',
  OUTBOX_POLL_INTERVAL_MS: '20',
  OUTBOX_PUBLISH_CONCURRENCY: '2',
  OUTBOX_PIPELINE_DEPTH: '2',
};

/**
 * Lease of a pass that crashes, seconds: its rows come back this long after its claim. The
 * shortest OUTBOX_LEASE_SECONDS takes (a pass needs 4 s of it to send a round and mark it).
 */
const CRASH_LEASE_SECONDS = 5;

/** What the outbox's trigger recorded: claims (a lease token set), marks and deletes. */
const AUDIT = `
  create table public.outbox_audit (
    n bigserial primary key, kind text not null, row_id bigint not null, app text not null,
    old_token uuid, new_token uuid, old_expires timestamptz, was_published boolean, at timestamptz not null);
  create function public.outbox_audit() returns trigger language plpgsql security definer
  set search_path = pg_catalog, pg_temp as $$
  begin
    if tg_op = 'DELETE' then
      insert into public.outbox_audit (kind, row_id, app, old_token, was_published, at)
      values ('delete', old.id, current_setting('application_name'), old.lease_token,
              old.published_at is not null, now());
      return old;
    end if;
    if new.lease_token is not null and new.lease_token is distinct from old.lease_token then
      insert into public.outbox_audit (kind, row_id, app, old_token, new_token, old_expires, at)
      values ('claim', new.id, current_setting('application_name'), old.lease_token, new.lease_token,
              old.lease_expires_at, now());
    end if;
    if old.published_at is null and new.published_at is not null then
      insert into public.outbox_audit (kind, row_id, app, old_token, at)
      values ('mark', new.id, current_setting('application_name'), old.lease_token, now());
    end if;
    return new;
  end $$;
  create trigger outbox_audit after update or delete on outbox.outbox
  for each row execute function public.outbox_audit();`;

for (const ref of previousRelayReleases()) {
  describe(`the previous release (${ref}) and this one: relays and monitors on one database`, () => {
    let previous: Release;
    let current: Release;
    let db: EmptyDatabase;
    let admin: postgres.Sql;
    let bus: LocalBus;
    let roles: Platform.OutboxRoles;
    const password = `test-${randomBytes(4).toString('hex')}`;
    const closers: (() => Promise<void>)[] = [];

    /** The database (by default the test's) as `role`. */
    const urlOf = (role: string, database = db.url) => {
      const url = new URL(database);
      url.username = role;
      url.password = password;
      return url.toString();
    };
    const release = (name: Release['name']) => (name === 'previous' ? previous : current);

    /** `outbox migrate --roles` of a release: what its deploy-time Trigger runs. */
    async function deploy(r: Release, options: { relayDeletesPublished?: boolean } = {}) {
      await r.operations.migrateWithRoles(db.url, { roles, statementTimeoutMs: 7_000, ...options });
      for (const role of [roles.relay, roles.monitor])
        await admin.unsafe(`alter role "${role}" password '${password}'`);
    }

    /** A release's relay as its `createRelay` wires it, logged in as the relay role. */
    function relayOf(r: Release, env: Record<string, string> = {}, database = db.url, role = roles.relay) {
      const relay = r.relay.createRelay({
        url: urlOf(role, database),
        env: {},
        settings: r.platform.loadRelaySettings({ ...RELAY_ENV, ...env }),
        applicationName: `relay-${r.name}`,
        clientConfig: {
          endpoint: bus.url,
          region: 'us-east-1',
          credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
          maxAttempts: 1,
        },
      });
      closers.push(() => relay.close(1));
      return relay;
    }

    /**
     * A release's monitor handler as its Lambda entry point wires it, logged in as the monitor
     * role: with the release's OUTBOX_SEARCH_PATH at connect where it has one (since 024), else
     * none (the role's default).
     */
    function monitorOf(
      r: Release,
      env: Record<string, string> = {},
      database = db.url,
      role = roles.monitor,
    ) {
      const searchPath = (r.platform as { OUTBOX_SEARCH_PATH?: string }).OUTBOX_SEARCH_PATH;
      const sql = r.platform.connect({
        url: urlOf(role, database),
        env: {},
        max: 2,
        applicationName: `monitor-${r.name}`,
        ...(searchPath ? { searchPath } : {}),
      });
      closers.push(() => sql.end({ timeout: 1 }));
      const handler = r.createMonitorHandler({
        sql,
        settings: r.platform.loadMonitorSettings({
          OUTBOX_METRIC_NAMESPACE: 'OutboxTest',
          OUTBOX_PRUNE_BATCH_SIZE: '20',
          ...env,
        }),
      });
      return async () => {
        quiet(+1);
        try {
          return await handler({}, lambdaContext(30_000, `monitor-${r.name}`));
        } finally {
          quiet(-1);
        }
      };
    }

    beforeAll(async () => {
      previous = await loadRelease('previous', previousRelease(ref));
      current = await loadRelease('current', ROOT);
      bus = await startLocalBus();
      // The server's default search_path ("$user", public), as a production database has: nothing
      // but the roles' defaults leads an unqualified name to schema outbox.
      db = await createEmptyDatabase({ legacyPublic: true });
      admin = postgres(db.url, { max: 2, onnotice: () => {}, connection: { search_path: 'public, outbox' } });
      const suffix = randomBytes(4).toString('hex');
      roles = {
        relay: `relay_${suffix}`,
        monitor: `monitor_${suffix}`,
        producer: `producer_${suffix}`,
        consumer: `consumer_${suffix}`,
      };
      await deploy(previous); // the install, by the previous release
      await deploy(current); // the upgrade: this release's migrations and roles
      await admin.unsafe(AUDIT);
    });

    afterAll(async () => {
      for (const close of closers) await close().catch(() => {});
      await admin?.end({ timeout: 1 });
      await bus?.close();
      await db?.drop();
      for (const role of Object.values(roles ?? {})) {
        const a = postgres(new URL('/postgres', db.url).toString(), { max: 1, onnotice: () => {} });
        await a.unsafe(`drop role if exists "${role}"`).catch(() => {});
        await a.end();
      }
    });

    /** A fresh outbox: `aggregates` orders of `perAggregate` events each, enqueued by this release. */
    async function backlog(aggregates: number, perAggregate: number, tag: string) {
      await admin`truncate outbox.outbox, outbox.outbox_aggregate, outbox.outbox_idempotency_key, public.outbox_audit`;
      bus.reset();
      bus.setFaults({});
      const events = Array.from({ length: aggregates * perAggregate }, (_, i) => ({
        type: 'OrderChanged',
        source: 'shop.orders',
        aggregateType: 'order',
        aggregateId: `${tag}-${i % aggregates}`,
        payload: { i },
      }));
      const sql = current.platform.connect({ url: db.url, env: {}, max: 1 });
      try {
        for (let i = 0; i < events.length; i += 200)
          await sql.begin((tx) => enqueueMany(tx, events.slice(i, i + 200)));
      } finally {
        await sql.end({ timeout: 1 });
      }
      return events.length;
    }

    const delivered = () => bus.events.map((e) => e.detail.metadata as EnvelopeMetadata);

    /** Each aggregate's deliveries, duplicates included, never go back: 1, 1, 2, 3, … */
    function orderViolations(events: readonly EnvelopeMetadata[]): string[] {
      const last = new Map<string, number>();
      const violations: string[] = [];
      for (const m of events) {
        const key = `${m.aggregateType}/${m.aggregateId}`;
        const top = last.get(key) ?? 0;
        if (m.sequence < top) violations.push(`${key}: #${m.sequence} after #${top}`);
        last.set(key, Math.max(top, m.sequence));
      }
      return violations;
    }

    /** Claims of a row whose previous lease had not run out (none may exist). */
    const claimsWhileHeld = () => admin<{ row_id: string; app: string; at: Date; old_expires: Date }[]>`
      select row_id, app, at, old_expires from public.outbox_audit
      where kind = 'claim' and old_token is not null and old_token <> new_token and old_expires > at`;

    /** Rows each application marked published (or, with no history, deleted as published). */
    async function finishedBy(kind: 'mark' | 'delete'): Promise<Record<string, number>> {
      const rows = await admin<{ app: string; n: number }[]>`
        select app, count(*)::int as n from public.outbox_audit where kind = ${kind} group by app`;
      return Object.fromEntries(rows.map((r) => [r.app, r.n]));
    }

    const unmarked = async () =>
      (
        await admin<{ n: number }[]>`select count(*)::int as n from outbox.outbox where published_at is null`
      )[0]?.n;

    /** Every event of the outbox's enqueue on the bus: the ids enqueued, each delivered at least once. */
    async function expectAllDelivered(enqueued: number) {
      const ids = new Set(delivered().map((m) => m.eventId));
      expect(ids.size, 'every event reached the bus').toBe(enqueued);
      expect(orderViolations(delivered()), "each aggregate's deliveries in order").toEqual([]);
      expect(await claimsWhileHeld(), 'no row claimed while another lease held it').toEqual([]);
    }

    it('logs in as the roles, whose default search_path leads the previous release to schema outbox', async () => {
      const sql = previous.platform.currentSql(relayOf(previous).sql);
      const [session] = await sql<{ user: string; path: string; schema: string }[]>`
        select current_user as user, current_setting('search_path') as path,
               (select relnamespace::regnamespace::text from pg_class where oid = 'outbox'::regclass) as schema`;
      // The previous relay's own pool, as its createRelay opens it: the role, its default path,
      // and the unqualified name `outbox` is the moved table.
      expect(session).toEqual({ user: roles.relay, path: 'pg_catalog, outbox, pg_temp', schema: 'outbox' });
      const [monitor] = await admin<{ path: string }[]>`
        select pg_catalog.array_to_string(setconfig, ' ') as path from pg_catalog.pg_db_role_setting
        where setrole = ${roles.monitor}::regrole and setdatabase = 0`;
      expect(monitor?.path).toContain('search_path=pg_catalog, outbox, pg_temp');
    });

    /** Four roles of a test's own (random names), for `migrateWithRoles` on a database of its own. */
    const newRoles = () => {
      const suffix = randomBytes(4).toString('hex');
      return {
        relay: `relay_${suffix}`,
        monitor: `monitor_${suffix}`,
        producer: `producer_${suffix}`,
        consumer: `consumer_${suffix}`,
      };
    };

    for (const installed of ['installed', 'upgraded'] as const) {
      it(`the previous release's outbox migrate --roles on a database this release ${installed} (a stack rolled back) leaves one outbox`, async () => {
        // A stack rolled back runs the previous release's migrate Trigger again. Before 024 that
        // looked for its history in public.outbox_migrations: not finding it, it installed a
        // second outbox in public, where its producers' unqualified calls then enqueued and no
        // relay looked. It must refuse instead (or, for a release that finds its history, do
        // nothing): one outbox table, in schema outbox, and the relay role still finds it.
        const other = await createEmptyDatabase({ legacyPublic: true });
        const own = newRoles();
        try {
          if (installed === 'upgraded') await previous.operations.migrateWithRoles(other.url, { roles: own });
          await current.operations.migrateWithRoles(other.url, { roles: own });
          const rolledBack = await previous.operations.migrateWithRoles(other.url, { roles: own }).then(
            (applied) => ({ applied }),
            (error: Error) => ({ refused: error.message }),
          );
          const [where] = await other.sql<{ outboxes: string[]; enqueues: string[] }[]>`
            select array(select n.nspname::text from pg_catalog.pg_class c
                         join pg_catalog.pg_namespace n on n.oid = c.relnamespace
                         where c.relname = 'outbox' and c.relkind = 'r' order by 1) as outboxes,
                   array(select n.nspname::text from pg_catalog.pg_proc p
                         join pg_catalog.pg_namespace n on n.oid = p.pronamespace
                         where p.proname = 'outbox_enqueue' and p.prosecdef order by 1) as enqueues`;
          // Refused at its history, before it applies anything (migration 032's view).
          const refusal = /Unable to ensure migrations table: .*"outbox_migrations"/;
          expect({ rolledBack, ...where }).toEqual({
            rolledBack:
              'applied' in rolledBack ? { applied: [] } : { refused: expect.stringMatching(refusal) },
            outboxes: ['outbox'],
            enqueues: ['outbox'],
          });
        } finally {
          await other.drop();
          for (const role of Object.values(own))
            await admin.unsafe(`drop role if exists "${role}"`).catch(() => {});
        }
      });
    }

    it('on a database this release installed, the previous relay and monitor run as the roles it made (a rollback after a fresh install)', async () => {
      const fresh = await createEmptyDatabase({ legacyPublic: true });
      // Roles of its own: a role's default search_path is the cluster's, and 024 set the others'.
      const own = newRoles();
      try {
        // Only this release's `outbox migrate --roles`: no migration 024 moved anything, the
        // role defaults are ensureRoles' alone.
        await current.operations.migrateWithRoles(fresh.url, { roles: own, statementTimeoutMs: 7_000 });
        for (const role of [own.relay, own.monitor])
          await admin.unsafe(`alter role "${role}" password '${password}'`);
        bus.reset();
        bus.setFaults({});
        const sql = current.platform.connect({ url: fresh.url, env: {}, max: 1 });
        try {
          await sql.begin((tx) =>
            enqueueMany(
              tx,
              Array.from({ length: 60 }, (_, i) => ({
                type: 'OrderChanged',
                source: 'shop.orders',
                aggregateType: 'order',
                aggregateId: `fresh-${i % 6}`,
                payload: { i },
              })),
            ),
          );
        } finally {
          await sql.end({ timeout: 1 });
        }
        const result = await relayOf(previous, {}, fresh.url, own.relay).run({ untilEmpty: true });
        expect(result).toMatchObject({ published: 60, stopReason: 'empty' });
        expect(orderViolations(delivered())).toEqual([]);
        expect(new Set(delivered().map((m) => m.eventId)).size).toBe(60);
        const summary = await monitorOf(previous, {}, fresh.url, own.monitor)();
        expect(summary.status).toMatchObject({ pending: 0, inFlight: 0, deadLettered: 0 });
        expect(summary.prune).toMatchObject({ publishedDeleted: 0, complete: true });
      } finally {
        for (const close of closers.splice(0)) await close().catch(() => {});
        await fresh.drop();
        for (const role of Object.values(own))
          await admin.unsafe(`drop role if exists "${role}"`).catch(() => {});
      }
    });

    it('both relays poll at once over a backlog of many aggregates, through bus faults', async () => {
      const enqueued = await backlog(150, 8, 'both');
      bus.setFaults({ entryFailureRate: 0.05, lostResponseRate: 0.02, throttleRate: 0.02 });
      const [a, b] = await Promise.all([
        relayOf(previous).run({ untilEmpty: true }),
        relayOf(current).run({ untilEmpty: true }),
      ]);
      expect(a.stopReason).toBe('empty');
      expect(b.stopReason).toBe('empty');
      await expectAllDelivered(enqueued);
      expect(await unmarked(), 'every row marked').toBe(0);
      const marked = await finishedBy('mark');
      expect((marked['relay-previous'] ?? 0) + (marked['relay-current'] ?? 0)).toBe(enqueued);
      // Both did a share of the work: the check above covers their claims interleaved.
      expect(marked['relay-previous'], 'rows the previous relay marked').toBeGreaterThan(enqueued / 10);
      expect(marked['relay-current'], 'rows this relay marked').toBeGreaterThan(enqueued / 10);
    });

    for (const [crashed, taker, name] of [
      ['previous', 'current', 'upgrade'],
      ['current', 'previous', 'rollback'],
    ] as const) {
      it(`${name}: the ${crashed} relay crashes mid-batch, the ${taker} one takes its rows over once the lease ran out`, async () => {
        const enqueued = await backlog(40, 5, name);
        const dying = relayOf(release(crashed));
        const r = release(crashed);
        const lease = new r.Lease(CRASH_LEASE_SECONDS);
        const crash = new Error('crashed (injected): after its first round was sent, before the marks');
        const failed = await r
          .relayPass({ sql: dying.sql, publisher: dying.publisher, settings: dying.settings }, lease, {
            checkpoint: async (step) => {
              if (step === 'sent') throw crash;
            },
          })
          .then(
            () => undefined,
            (e: unknown) => e,
          );
        expect(failed).toBe(crash);
        const sentBeforeCrash = delivered().map((m) => m.eventId);
        expect(sentBeforeCrash.length, 'the crashed pass sent its first round').toBeGreaterThan(0);
        const [held] = await admin<{ n: number }[]>`
          select count(*)::int as n from outbox.outbox where lease_token = ${lease.token}::uuid`;
        expect(held?.n, 'the crashed lease holds its batch').toBeGreaterThanOrEqual(sentBeforeCrash.length);

        const result = await relayOf(release(taker)).run({ untilEmpty: true });
        expect(result.stopReason).toBe('empty');
        await expectAllDelivered(enqueued);
        expect(await unmarked(), 'every row marked').toBe(0);
        // What the crashed pass sent went out again (at least once), nothing else did.
        const counts = new Map<string, number>();
        for (const m of delivered()) counts.set(m.eventId, (counts.get(m.eventId) ?? 0) + 1);
        const twice = [...counts].filter(([, n]) => n > 1).map(([id]) => id);
        expect(twice.sort()).toEqual([...sentBeforeCrash].sort());
        // The crashed lease's rows: taken over by the other release, after the lease ran out.
        const takeovers = await admin<{ app: string; after: boolean }[]>`
          select app, at >= old_expires as after from public.outbox_audit
          where kind = 'claim' and old_token = ${lease.token}::uuid`;
        expect(takeovers.length).toBe(held?.n);
        expect(new Set(takeovers.map((t) => `${t.app} after expiry: ${t.after}`))).toEqual(
          new Set([`relay-${taker} after expiry: true`]),
        );
        expect(await finishedBy('mark')).toEqual({ [`relay-${taker}`]: enqueued });
      });
    }

    for (const [monitorRelease, relayRelease] of [
      ['previous', 'current'],
      ['current', 'previous'],
    ] as const) {
      it(`the ${monitorRelease} monitor prunes and counts beside the ${relayRelease} relay`, async () => {
        const enqueued = await backlog(60, 5, `m-${monitorRelease}`);
        // Old history beside the backlog, a month old: 40 published rows, 5 dead letters each
        // followed by a published event of its aggregate (45 published rows in all), and 10 inbox
        // records.
        await enqueueOld(40, 5);
        await admin`delete from outbox.inbox_message where consumer = 'billing'`;
        await admin`insert into outbox.inbox_message (consumer, message_key, outcome, processed_at)
          select 'billing', 'old-' || i, 'processed', now() - interval '60 days' from generate_series(1, 10) i`;
        const heartbeat = monitorRelease === 'current';
        const monitor = monitorOf(release(monitorRelease), {
          OUTBOX_PUBLISHED_RETENTION_DAYS: '7',
          OUTBOX_DEAD_LETTER_RETENTION_DAYS: '30',
          OUTBOX_INBOX_RETENTION_DAYS: '30',
          ...(heartbeat ? { OUTBOX_HEARTBEAT: 'on', OUTBOX_HEARTBEAT_INTERVAL_SECONDS: '86400' } : {}),
        });
        const summaries: Awaited<ReturnType<typeof monitor>>[] = [await monitor()];
        let relayDone = false;
        const relayRun = relayOf(release(relayRelease))
          .run({ untilEmpty: true })
          .finally(() => {
            relayDone = true;
          });
        while (!relayDone) summaries.push(await monitor());
        await relayRun;
        const last = await monitor();
        const pruned = [...summaries, last].map((s) => s.prune as Operations.PruneResult);
        const sum = (f: (p: Operations.PruneResult) => number) => pruned.reduce((n, p) => n + f(p), 0);
        expect(
          sum((p) => p.publishedDeleted),
          'old published rows pruned',
        ).toBe(45);
        expect(
          sum((p) => p.deadLettersDeleted),
          'old dead letters pruned',
        ).toBe(5);
        expect(
          sum((p) => p.inboxDeleted),
          'old inbox records pruned',
        ).toBe(10);
        const deletes = await admin<{ app: string; was_published: boolean; n: number }[]>`
          select app, was_published, count(*)::int as n from public.outbox_audit where kind = 'delete'
          group by 1, 2 order by 2`;
        expect(deletes, 'the monitor deleted no unpublished row but the old dead letters').toEqual([
          { app: `monitor-${monitorRelease}`, was_published: false, n: 5 },
          { app: `monitor-${monitorRelease}`, was_published: true, n: 45 },
        ]);
        // The backlog (and the heartbeat this release's monitor enqueues) went out whole, in order.
        const heartbeats = heartbeat ? 1 : 0;
        await expectAllDelivered(enqueued + heartbeats);
        expect(bus.events.filter((e) => e.source === 'outbox.heartbeat')).toHaveLength(heartbeats);
        expect(await unmarked()).toBe(0);
        expect(await finishedBy('mark')).toEqual({ [`relay-${relayRelease}`]: enqueued + heartbeats });
        expect(last.status).toMatchObject({ pending: 0, inFlight: 0, deadLettered: 0 });
        expect(
          summaries.every((s) => !('error' in s.status)),
          'every status counted',
        ).toBe(true);
      });
    }

    /**
     * `published` rows published 30 days ago, and `dead` dead letters as old, each the first of an
     * aggregate whose second event was published: what the monitor prunes.
     */
    async function enqueueOld(published: number, dead: number) {
      const sql = current.platform.connect({ url: db.url, env: {}, max: 1 });
      try {
        await sql.begin((tx) =>
          enqueueMany(tx, [
            ...Array.from({ length: published }, (_, i) => ({
              type: 'OrderChanged',
              source: 'shop.orders',
              aggregateType: 'old',
              aggregateId: `p-${i}`,
              payload: {},
            })),
            ...Array.from({ length: dead * 2 }, (_, i) => ({
              type: 'OrderChanged',
              source: 'shop.orders',
              aggregateType: 'old',
              aggregateId: `d-${i % dead}`,
              payload: {},
            })),
          ]),
        );
      } finally {
        await sql.end({ timeout: 1 });
      }
      await admin`update outbox.outbox set created_at = now() - interval '40 days',
        published_at = now() - interval '30 days' where aggregate_type = 'old'`;
      await admin`update outbox.outbox set published_at = null, dead_lettered_at = now() - interval '31 days',
        last_error = 'old' where aggregate_type = 'old' and aggregate_id like 'd-%' and sequence = 1`;
      await admin`truncate public.outbox_audit`;
    }

    it('no published history: both relays delete what they publish, both monitors prune beside them', async () => {
      // The deploy that turns the mode on: the relay role may now delete rows.
      await deploy(current, { relayDeletesPublished: true });
      const enqueued = await backlog(120, 6, 'nh');
      await enqueueOld(20, 0); // left from before the switch: the monitors sweep them
      const env = { OUTBOX_PUBLISHED_RETENTION_DAYS: '0' };
      const monitors = [monitorOf(previous, env), monitorOf(current, env)];
      let done = 0;
      const relays = [relayOf(previous, env), relayOf(current, env)].map((r) =>
        r.run({ untilEmpty: true }).finally(() => {
          done++;
        }),
      );
      const summaries: Awaited<ReturnType<(typeof monitors)[0]>>[] = [];
      while (done < 2) summaries.push(...(await Promise.all(monitors.map((m) => m()))));
      await Promise.all(relays);
      summaries.push(...(await Promise.all(monitors.map((m) => m()))));
      expect(delivered()).toHaveLength(enqueued); // no fault: each event exactly once
      await expectAllDelivered(enqueued);
      const [left] = await admin<{ n: number }[]>`select count(*)::int as n from outbox.outbox`;
      expect(left?.n, 'no row left').toBe(0);
      const deleted = await finishedBy('delete');
      expect((deleted['relay-previous'] ?? 0) + (deleted['relay-current'] ?? 0)).toBe(enqueued);
      expect(deleted['relay-previous'], 'rows the previous relay deleted').toBeGreaterThan(enqueued / 10);
      expect(deleted['relay-current'], 'rows this relay deleted').toBeGreaterThan(enqueued / 10);
      expect(
        (deleted['monitor-previous'] ?? 0) + (deleted['monitor-current'] ?? 0),
        'the old rows swept',
      ).toBe(20);
      const unpublishedDeletes = await admin`
        select app from public.outbox_audit where kind = 'delete' and app like 'monitor-%' and not was_published`;
      expect(unpublishedDeletes, 'no monitor deleted a row not yet published').toEqual([]);
      expect(summaries.filter((s) => 'error' in s.status || 'error' in s.prune)).toEqual([]);
      expect(summaries.at(-1)?.status).toMatchObject({ pending: 0, inFlight: 0, deadLettered: 0 });
    });
  });
}
