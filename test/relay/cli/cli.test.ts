import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { Envelope } from '../../../shared/platform/envelope.ts';
import { enqueueMany } from '../../../shared/producer/enqueue.ts';
import { cliEnv, runCli, startCli } from '../../support/cli.ts';
import { createEmptyDatabase } from '../../support/db.ts';
import { useHarness } from '../../support/harness.ts';

const h = useHarness({ max: 10 });

/** The configuration contract's environment, pointing at the test database and local bus. */
const env = (extra: Record<string, string | undefined> = {}) => cliEnv(h, extra);

const start = (args: string[], options: { env?: NodeJS.ProcessEnv; stdin?: string } = {}) =>
  startCli(args, { env: options.env ?? env(), stdin: options.stdin });
const run = (args: string[], options: { env?: NodeJS.ProcessEnv; stdin?: string } = {}) =>
  runCli(args, { env: options.env ?? env(), stdin: options.stdin });

const line = (o: Record<string, unknown>) => JSON.stringify(o);

describe('outbox CLI', () => {
  it('migrate reports an up-to-date schema', async () => {
    const r = await run(['migrate']);
    expect(r.stderr).toBe('');
    expect(r.stdout.trim()).toBe('schema is up to date');
    expect(r.code).toBe(0);
  });

  it('migrate says why it skips 008 and 012: those numbers were never released', async () => {
    const empty = await createEmptyDatabase();
    try {
      const r = await run(['migrate'], { env: env({ DATABASE_URL: empty.url }) });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).toMatch(
        /^applied \d+ migration\(s\): 001_outbox, .*007_outbox_enqueue, 009_least_privilege,/m,
      );
      expect(r.stdout).toMatch(
        /^no migration 008, 012(, \d{3})*: those numbers were never released \(a migration takes the next number after the highest\)$/m,
      );
      // Nothing to say once the schema is up to date.
      expect((await run(['migrate'], { env: env({ DATABASE_URL: empty.url }) })).stdout.trim()).toBe(
        'schema is up to date',
      );
    } finally {
      await empty.drop();
    }
  });

  it('migrate --roles creates the deployment roles with the grants the Trigger gives them', async () => {
    const r = await run(['migrate', '--roles']);
    expect(r.stderr).toBe('');
    expect(r.stdout).toContain(
      'roles ensured: outbox_relay, outbox_monitor, outbox_producer, outbox_consumer',
    );
    expect(r.code).toBe(0);
    const rows = await h.db.sql<{ role: string; claims: boolean; prunes: boolean; enqueues: boolean }[]>`
      select r as role,
             has_column_privilege(r, 'outbox', 'lease_token', 'update') as claims,
             has_table_privilege(r, 'outbox', 'delete') as prunes,
             has_function_privilege(r, 'outbox_enqueue_many(text[], text[], text[], text[], jsonb[], text[], text[], integer)', 'execute') as enqueues
      from unnest(array['outbox_relay', 'outbox_monitor', 'outbox_producer']) as r order by r`;
    expect(rows).toEqual([
      { role: 'outbox_monitor', claims: false, prunes: true, enqueues: false },
      { role: 'outbox_producer', claims: false, prunes: false, enqueues: true },
      { role: 'outbox_relay', claims: true, prunes: false, enqueues: false },
    ]);
  });

  it('migrate --roles with OUTBOX_PUBLISHED_RETENTION_DAYS=0 lets the relay role delete rows, and a later deploy without it takes that away', async () => {
    const canDelete = async () =>
      (
        await h.db.sql<{ d: boolean }[]>`select has_table_privilege('outbox_relay', 'outbox', 'delete') as d`
      )[0]?.d;
    try {
      const r = await run(['migrate', '--roles'], { env: env({ OUTBOX_PUBLISHED_RETENTION_DAYS: '0' }) });
      expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
      expect(r.stdout).toContain(
        'outbox_relay may delete the rows it publishes (OUTBOX_PUBLISHED_RETENTION_DAYS=0: no published history)',
      );
      expect(await canDelete()).toBe(true);
    } finally {
      const r = await run(['migrate', '--roles'], { env: env({ OUTBOX_PUBLISHED_RETENTION_DAYS: '7' }) });
      expect(r.code, r.stderr).toBe(0);
      expect(r.stdout).not.toContain('may delete');
    }
    expect(await canDelete()).toBe(false);
  });

  it("migrate --roles --consumer creates the consumer's own role, whose policy is its own inbox rows", async () => {
    const consumer = `cli-${randomBytes(3).toString('hex')}`;
    const role = `outbox_consumer_${consumer}`;
    try {
      const r = await run(['migrate', '--roles', '--consumer', consumer, '--json']);
      expect({ code: r.code, stderr: r.stderr }).toEqual({ code: 0, stderr: '' });
      expect(JSON.parse(r.stdout)).toEqual({
        applied: [],
        roles: ['outbox_relay', 'outbox_monitor', 'outbox_producer', 'outbox_consumer', role],
        relayDeletesPublished: false,
      });
      const policies = await h.db.sql<{ tablename: string; qual: string }[]>`
        select tablename, qual from pg_policies where ${role} = any(roles) order by tablename`;
      expect(policies).toEqual(
        ['inbox_aggregate', 'inbox_failed', 'inbox_gap', 'inbox_message'].map((tablename) => ({
          tablename,
          qual: `(consumer = '${consumer}'::text)`,
        })),
      );
      // It updates the record's outcome, through a column privilege: a table-level UPDATE would let
      // it lock the table against every other consumer (migration 026).
      const [granted] = await h.db.sql<{ updates: boolean; locks: boolean }[]>`
        select has_column_privilege(${role}, 'inbox_message', 'outcome', 'update') as updates,
               has_table_privilege(${role}, 'inbox_message', 'update') as locks`;
      expect(granted).toEqual({ updates: true, locks: false });
    } finally {
      await h.db.sql.unsafe(`drop owned by "${role}"; drop role if exists "${role}"`);
    }
    const alone = await run(['migrate', '--consumer', consumer]);
    expect(alone.code).toBe(2);
    expect(alone.stderr).toMatch(/^error: --consumer creates a role: give --roles too\n/);
    const long = await run(['migrate', '--roles', '--consumer', 'x'.repeat(60)]);
    expect(long.code).toBe(2);
    expect(long.stderr).toMatch(/^error: --consumer the role of consumer "x+" would be named .*at most 63/);
    // A comma: the construct refuses such a name (its consumer list settings are comma-separated);
    // migrate created the role outbox_consumer_a,b (the new-user trial's find).
    const comma = await run(['migrate', '--roles', '--consumer', 'a,b']);
    expect(comma.code).toBe(2);
    expect(comma.stderr).toMatch(/^error: --consumer expected a consumer.s name without a comma, got "a,b"/);
    const [made] = await h.db
      .sql`select count(*)::int as n from pg_roles where rolname = 'outbox_consumer_a,b'`;
    expect(made?.n).toBe(0);
  });

  it('enqueue reads JSON lines, skips duplicates by idempotency key, and relay --until-empty publishes them', async () => {
    const input = [
      line({
        type: 'CustomerImported',
        aggregateType: 'customer',
        aggregateId: 'c1',
        payload: { name: 'Zoë' },
        idempotencyKey: 'import-c1',
      }),
      '',
      line({
        type: 'CustomerImported',
        aggregateType: 'customer',
        aggregateId: 'c2',
        payload: { name: 'Ana' },
        source: 'crm.import',
      }),
      line({
        type: 'CustomerImported',
        aggregateType: 'customer',
        aggregateId: 'c1',
        payload: { name: 'Zoë' },
        idempotencyKey: 'import-c1',
      }),
    ].join('\n');
    const r = await run(['enqueue', '--source', 'crm.backfill'], { stdin: input });
    expect(r.stdout.trim()).toBe('enqueued 2 event(s), 1 duplicate(s) skipped');
    expect(r.code).toBe(0);

    const relay = await run(['relay', '--until-empty']);
    expect(relay.code).toBe(0);
    expect(relay.stdout).toMatch(/relay stopped \(empty\) .*published 2, retried 0, dead-lettered 0/);
    expect(
      h.bus.events.map((e) => [
        e.source,
        (e.detail as unknown as Envelope).metadata.aggregateId,
        e.eventBusName,
      ]),
    ).toEqual([
      ['crm.backfill', 'c1', 'cli-bus'],
      ['crm.import', 'c2', 'cli-bus'],
    ]);
  });

  it('enqueue rejects the whole input when any line is invalid, naming line and field', async () => {
    const input = [
      line({ type: 'A', aggregateType: 'x', aggregateId: '1', payload: {}, source: 's' }),
      '{not json',
      line({ type: 'A', aggregateType: 'x', aggregateId: '2', payload: [], source: 's' }),
      line({ type: 'A', aggregateType: 'x', aggregateID: '3', payload: {}, source: 's' }),
      line({ type: 'A', aggregateType: 'x', aggregateId: '4', payload: {} }),
    ].join('\n');
    const r = await run(['enqueue'], { stdin: input });
    expect(r.code).toBe(1);
    expect(r.stderr).toContain('line 2: line: is not valid JSON');
    expect(r.stderr).toContain('line 3: payload: must be a plain JSON object');
    expect(r.stderr).toContain('line 4: aggregateID: is not a known field');
    expect(r.stderr).toContain(
      'line 5: source: is required; give the line a "source", or pass --source or set OUTBOX_DEFAULT_SOURCE',
    );
    expect(r.stderr).toContain('4 invalid line(s); nothing was written');
    const [count] = await h.db.sql`select count(*)::int as n from outbox`;
    expect(count?.n).toBe(0);
  });

  it('enqueue refuses a malformed --batch-size and honours the configured request limit', async () => {
    const line1 = line({
      type: 'A',
      aggregateType: 'x',
      aggregateId: '1',
      payload: { text: 'é'.repeat(150_000) },
      source: 's',
    });
    const bad = await run(['enqueue', '--batch-size', 'abc'], { stdin: line1 });
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("option '--batch-size <n>' argument 'abc' is invalid");
    const limited = await run(['enqueue'], {
      stdin: line1,
      env: env({ OUTBOX_MAX_REQUEST_BYTES: '262144' }),
    });
    expect(limited.code).toBe(1);
    expect(limited.stderr).toMatch(
      /line 1: payload: makes the EventBridge entry \d+ bytes, over the 262144-byte limit/,
    );
    const [count] = await h.db.sql`select count(*)::int as n from outbox`;
    expect(count?.n).toBe(0);
  });

  it('status --json reports pending, oldest pending age, in flight, dead-lettered and published', async () => {
    await h.db.sql.begin((tx) =>
      enqueueMany(
        tx,
        ['a', 'b', 'c', 'd'].map((id) => ({
          type: 'T',
          source: 's',
          aggregateType: 'x',
          aggregateId: id,
          payload: {},
        })),
      ),
    );
    await h.db.sql`update outbox set created_at = now() - interval '90 seconds' where aggregate_id = 'a'`;
    await h.db.sql`update outbox set published_at = now() where aggregate_id = 'b'`;
    await h.db.sql`update outbox set dead_lettered_at = now() where aggregate_id = 'c'`;
    await h.db
      .sql`update outbox set lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute' where aggregate_id = 'd'`;
    const r = await run(['status', '--json']);
    expect(r.code).toBe(0);
    const status = JSON.parse(r.stdout);
    expect(status).toMatchObject({ pending: 2, inFlight: 1, deadLettered: 1, published: 1 });
    expect(status.oldestPendingAgeSeconds).toBeGreaterThanOrEqual(90);
    expect(status.oldestPendingAgeSeconds).toBeLessThan(120);
    // With no published history the published line says why it reads what it does.
    const human = await run(['status'], { env: env({ OUTBOX_PUBLISHED_RETENTION_DAYS: '0' }) });
    expect(human.stdout).toMatch(
      /^published: +1 \(OUTBOX_PUBLISHED_RETENTION_DAYS=0: published rows are deleted as they go out\)$/m,
    );
    expect((await run(['status'])).stdout).toMatch(/^published: +1$/m);
  });

  it('status --json counts the events held back behind a block dead letter, and names the dead letter', async () => {
    const events = (aggregateId: string, n: number) =>
      Array.from({ length: n }, (_, i) => ({
        type: 'T',
        source: 's',
        aggregateType: 'order',
        aggregateId,
        payload: { i },
      }));
    await h.db.sql.begin((tx) => enqueueMany(tx, [...events('stuck', 6), ...events('fine', 2)]));
    // The first event of `stuck` failed for good: under `block` the 5 behind it wait for an operator.
    await h.db
      .sql`update outbox set dead_lettered_at = now(), attempts = 1, last_error = 'InvalidArgument: refused'
      where aggregate_id = 'stuck' and sequence = 1`;
    const blockEnv = env({ OUTBOX_DEAD_LETTER_POLICY: 'block' });
    const relayed = await run(['relay', '--until-empty', '--json'], { env: blockEnv });
    // It stops with exit 1, saying the 5 wait behind a dead letter (what status must count too).
    expect(relayed.code, relayed.stderr).toBe(1);
    const r = await run(['status', '--json'], { env: blockEnv });
    expect(r.code, r.stderr).toBe(0);
    const status = JSON.parse(r.stdout);
    const [dead] = await h.db
      .sql`select id::text, event_id::text from outbox where dead_lettered_at is not null`;
    expect(status).toMatchObject({
      pending: 5,
      deadLettered: 1,
      published: 2,
      heldBack: 5,
      heldBackBy: [
        {
          id: dead?.id,
          eventId: dead?.event_id,
          aggregateType: 'order',
          aggregateId: 'stuck',
          sequence: '1',
          heldBack: 5,
        },
      ],
      inBackoff: 0,
      retrying: 0,
      lastErrors: [],
      // Held-back rows are not claimable: the monitor would start no extra relay for them.
      scaleOut: { relays: 1, maxRelays: 1, claimable: 0, throttled: false },
    });
    const human = await run(['status'], { env: blockEnv });
    expect(human.stdout).toMatch(/^held back: +5 \(behind 1 dead letter, OUTBOX_DEAD_LETTER_POLICY=block/m);
    expect(human.stdout).toMatch(new RegExp(`^  5 behind dead letter ${dead?.id} \\(order/stuck #1\\)`, 'm'));
    // Discarded, it holds nothing back.
    await h.db.sql`update outbox set discarded_at = now() where dead_lettered_at is not null`;
    expect(JSON.parse((await run(['status', '--json'], { env: blockEnv })).stdout)).toMatchObject({
      heldBack: 0,
      heldBackBy: [],
    });
  });

  it('status counts the rows in backoff and says what the monitor would scale to', async () => {
    await h.db.sql.begin((tx) =>
      enqueueMany(
        tx,
        Array.from({ length: 25 }, (_, i) => ({
          type: 'T',
          source: 's',
          aggregateType: 'x',
          aggregateId: String(i),
          payload: {},
        })),
      ),
    );
    // 3 wait out a backoff after a failed attempt; 2 were leased by a relay (in flight, not in backoff).
    await h.db.sql`update outbox set attempts = 1, last_error = 'InternalFailure: try again',
      available_at = now() + interval '1 minute' where aggregate_id in ('0', '1', '2')`;
    await h.db.sql`update outbox set attempts = 1, last_error = 'InternalFailure: try again',
      available_at = now() + interval '1 minute', lease_token = gen_random_uuid(),
      lease_expires_at = now() + interval '1 minute' where aggregate_id in ('3', '4')`;
    const scaled = env({ OUTBOX_MAX_RELAYS: '4', OUTBOX_BACKLOG_PER_RELAY: '8' });
    const r = await run(['status', '--json'], { env: scaled });
    expect(r.code, r.stderr).toBe(0);
    // 20 claimable at 8 per relay: 3 relays of 4.
    expect(JSON.parse(r.stdout)).toMatchObject({
      pending: 25,
      inFlight: 2,
      inBackoff: 3,
      // The 5 that failed, in backoff or leased again, with the error their last attempt had.
      retrying: 5,
      lastErrors: [{ error: 'InternalFailure: try again', count: 5 }],
      heldBack: 0,
      scaleOut: { relays: 3, maxRelays: 4, backlogPerRelay: 8, claimable: 20, throttled: false },
    });
    const human = await run(['status'], { env: scaled });
    expect(human.stdout).toMatch(/^in backoff: +3$/m);
    expect(human.stdout).toMatch(
      /^retrying: +5 \(their last attempt failed, with:\)\n {2}5 × InternalFailure: try again$/m,
    );
    expect(human.stdout).toMatch(/^monitor scales to: +3 relays of 4 \(20 claimable, 8 per relay\)$/m);
    const off = await run(['status'], { env: env({ OUTBOX_MAX_RELAYS: '1' }) });
    expect(off.stdout).toMatch(/^monitor scales to: +1 relay \(scale-out off: OUTBOX_MAX_RELAYS=1\)$/m);
  });

  it('relay fails fast with a message naming a missing or malformed variable', async () => {
    const missing = await run(['relay', '--once'], { env: env({ EVENT_BUS_NAME: '' }) });
    expect(missing.code).toBe(2);
    expect(missing.stderr.trim()).toBe(
      'error: EVENT_BUS_NAME: is required: the name or ARN of the EventBridge event bus to publish to; ' +
        'for a local bus, `npx outbox bus` (the relay package) prints the exports to set',
    );
    const malformed = await run(['relay', '--once'], { env: env({ OUTBOX_BATCH_SIZE: 'lots' }) });
    expect(malformed.code).toBe(2);
    expect(malformed.stderr).toMatch(/^error: OUTBOX_BATCH_SIZE: .*\(got "lots"\)/);
  });

  it('relay --until-empty gives up on an unreachable database with exit 1 instead of retrying forever', async () => {
    const r = await run(['relay', '--until-empty'], {
      env: env({
        DATABASE_URL: 'postgres://postgres@127.0.0.1:9/none',
        OUTBOX_DB_CONNECT_TIMEOUT_SECONDS: '1',
      }),
    });
    expect(r.code).toBe(1);
    expect(r.stderr).toMatch(/database unavailable \(ECONNREFUSED\)/);
    expect(r.stderr).toMatch(/^error: .*ECONNREFUSED/m);
  }, 60_000);

  it('relay refuses to start without an AWS region instead of dead-lettering every event', async () => {
    await h.db.sql.begin((tx) =>
      enqueueMany(tx, [{ type: 'T', source: 's', aggregateType: 'x', aggregateId: 'r', payload: {} }]),
    );
    const r = await run(['relay', '--until-empty'], { env: env({ AWS_REGION: '' }) });
    expect(r.code).toBe(2);
    expect(r.stderr).toMatch(/^error: AWS_REGION: is required to sign PutEvents requests/);
    // What to set, not only what is missing.
    expect(r.stderr).toMatch(/set the bus's region, e\.g\. AWS_REGION=eu-west-1/);
    expect(r.stderr).toMatch(/`npx outbox bus`/);
    const [row] = await h.db.sql`select attempts, dead_lettered_at from outbox`;
    expect(row).toEqual({ attempts: 0, dead_lettered_at: null });
  });

  it('a relay killed mid-publication leaves nothing lost: the next relay publishes every row', async () => {
    await h.db.sql.begin((tx) =>
      enqueueMany(
        tx,
        Array.from({ length: 200 }, (_, i) => ({
          type: 'T',
          source: 's',
          aggregateType: 'x',
          aggregateId: String(i),
          payload: { i },
        })),
      ),
    );
    h.bus.setFaults({ latencyMs: 100 });
    const child = start(['relay'], { env: env({ OUTBOX_LEASE_SECONDS: '5', OUTBOX_BATCH_SIZE: '50' }) });
    // Kill it as soon as the bus has accepted something, mid-way through its work.
    await new Promise<void>((resolve) => h.bus.emitter.once('accepted', () => resolve()));
    child.kill('SIGKILL');
    await new Promise((r) => child.on('close', r));
    const [left] = await h.db.sql`select count(*)::int as n from outbox where published_at is null`;
    expect(left?.n).toBeGreaterThan(0);
    h.bus.setFaults({});

    // The next relay waits for the dead relay's leases to expire (5 s), then publishes everything.
    const r = await run(['relay', '--until-empty'], { env: env({ OUTBOX_LEASE_SECONDS: '5' }) });
    expect(r.code).toBe(0);
    const [after] = await h.db.sql`select count(*)::int as n from outbox where published_at is null`;
    expect(after?.n).toBe(0);
    const ids = new Set(h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.eventId));
    expect(ids.size).toBe(200);
  });

  it('--json prints exactly one JSON document on stdout for every command that offers it (lists as arrays, even empty)', async () => {
    const doc = async (args: string[], stdin?: string) => {
      const r = await run(args, { stdin });
      expect(r.code, `${args.join(' ')}: ${r.stderr}`).toBe(0);
      return JSON.parse(r.stdout) as unknown;
    };
    expect(await doc(['migrate', '--json'])).toEqual({ applied: [] });
    expect(await doc(['dead-letters', 'list', '--json'])).toEqual([]);
    const input = ['ok', 'poison']
      .map((id) => line({ type: 'T', source: 's', aggregateType: 'x', aggregateId: id, payload: { id } }))
      .join('\n');
    expect(await doc(['enqueue', '--json'], input)).toEqual({ enqueued: 2, duplicates: 0, errors: [] });
    h.bus.setFaults({ poisonMarker: '"id":"poison"', poisonCode: 'InvalidArgument' });
    expect(await doc(['relay', '--until-empty', '--json'])).toMatchObject({ published: 1, deadLettered: 1 });
    expect(await doc(['status', '--json'])).toMatchObject({ pending: 0, deadLettered: 1, published: 1 });
    const list = (await doc(['dead-letters', 'list', '--json'])) as { id: string; eventId: string }[];
    expect(list).toEqual([expect.objectContaining({ aggregateId: 'poison', attempts: 1 })]);
    const id = list[0]?.eventId as string;
    expect(await doc(['dead-letters', 'show', id, '--json'])).toMatchObject({
      eventId: id,
      payload: { id: 'poison' },
    });
    expect(await doc(['dead-letters', 'discard', id, '--json'])).toEqual({ discarded: 1 });
    expect(await doc(['dead-letters', 'replay', '--all', '--json'])).toEqual({ replayed: 0 });
    expect(await doc(['prune', '--dry-run', '--json'])).toMatchObject({ dryRun: true, publishedDeleted: 0 });
  });

  it('dead-letters show prints the dead letter for a terminal, and --json for programs', async () => {
    await h.db.sql.begin((tx) =>
      enqueueMany(tx, [{ type: 'T', source: 's', aggregateType: 'x', aggregateId: 'p', payload: { n: 1 } }]),
    );
    await h.db
      .sql`update outbox set dead_lettered_at = now(), attempts = 1, last_error = 'InvalidArgument: refused'`;
    const [row] = await h.db.sql`select id from outbox`;
    const r = await run(['dead-letters', 'show', String(row?.id)]);
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^aggregate: +x\/p #1$/m);
    expect(r.stdout).toMatch(/^error: +InvalidArgument: /m);
    expect(r.stdout).toMatch(/^payload:\n {2}\{\n {4}"n": 1\n {2}\}$/m);
  });
});
