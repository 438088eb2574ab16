import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { createMonitorHandler } from '../../../functions/monitor/monitor-handler.ts';
import { createRelayHandler } from '../../../functions/relay/relay-handler.ts';
import { connect } from '../../../shared/platform/db.ts';
import type { Envelope } from '../../../shared/platform/envelope.ts';
import { enqueueMany } from '../../../shared/producer/enqueue.ts';
import { runRelay } from '../../../shared/relay/index.ts';
import {
  discardDeadLetters,
  listDeadLetters,
  replayDeadLetters,
  resolveDeadLetterIds,
} from '../../../shared/relay/operations/dead-letters.ts';
import { prune } from '../../../shared/relay/operations/prune.ts';
import { createRelay } from '../../../shared/relay/run-relay.ts';
import { useHarness } from '../../support/harness.ts';
import { lambdaContext } from '../../support/lambda.ts';
import { testClient, testSettings } from '../../support/relay.ts';

const BIN = fileURLToPath(new URL('../../../shared/relay/bin/outbox.js', import.meta.url));
const DAY = 86_400;

const h = useHarness({ max: 10 });

async function seed(ids: string[], aggregateType = 'order') {
  await h.db.sql.begin((tx) =>
    enqueueMany(
      tx,
      ids.map((id) => ({
        type: 'OrderPlaced',
        source: 'shop.orders',
        aggregateType,
        aggregateId: id,
        payload: { id },
      })),
    ),
  );
}

/** Runs `fn` and returns the EMF documents written to stdout meanwhile. */
async function captureEmf(fn: () => Promise<unknown>): Promise<Record<string, unknown>[]> {
  const lines: string[] = [];
  const write = process.stdout.write.bind(process.stdout);
  process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    lines.push(String(chunk));
    return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stdout.write;
  try {
    await fn();
  } finally {
    process.stdout.write = write;
  }
  return lines
    .flatMap((l) => l.split('\n'))
    .filter((l) => l.includes('"_aws"'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

describe('prune', () => {
  it('deletes only published rows past the retention, in batches of at most the batch size', async () => {
    await seed(['p1', 'p2', 'p3', 'p4', 'p5', 'recent', 'pending', 'leased', 'expired', 'dead', 'old-dead']);
    await h.db.sql`update outbox set created_at = now() - interval '30 days'`;
    await h.db.sql`update outbox set published_at = now() - interval '30 days' where aggregate_id like 'p_'`;
    await h.db.sql`update outbox set published_at = now() - interval '1 day' where aggregate_id = 'recent'`;
    await h.db
      .sql`update outbox set lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 minute' where aggregate_id = 'leased'`;
    await h.db
      .sql`update outbox set lease_token = gen_random_uuid(), lease_expires_at = now() - interval '29 days' where aggregate_id = 'expired'`;
    await h.db
      .sql`update outbox set dead_lettered_at = now() - interval '30 days' where aggregate_id = 'dead'`;
    await h.db
      .sql`update outbox set dead_lettered_at = now() - interval '31 days', discarded_at = now() where aggregate_id = 'old-dead'`;

    const result = await prune(h.db.sql, {
      publishedRetentionSeconds: 7 * DAY,
      deadLetterRetentionSeconds: 30.5 * DAY,
      batchSize: 2,
      timeBudgetMs: 10_000,
    });
    expect(result).toMatchObject({
      publishedDeleted: 5,
      deadLettersDeleted: 1,
      complete: true,
      batches: [2, 2, 1, 1],
    });
    const left = await h.db.sql<
      { aggregate_id: string }[]
    >`select aggregate_id from outbox order by aggregate_id`;
    expect(left.map((r) => r.aggregate_id)).toEqual(['dead', 'expired', 'leased', 'pending', 'recent']);
  });

  it('deletes inbox records past their retention only when asked to', async () => {
    await h.db.sql`truncate inbox_message`;
    await h.db.sql`
      insert into inbox_message (consumer, message_key, processed_at)
      values ('c', 'old-1', now() - interval '31 days'), ('c', 'old-2', now() - interval '40 days'), ('c', 'recent', now() - interval '2 days')`;
    const base = {
      publishedRetentionSeconds: 7 * DAY,
      deadLetterRetentionSeconds: 30 * DAY,
      batchSize: 10,
      timeBudgetMs: 5_000,
    };
    expect((await prune(h.db.sql, base)).inboxDeleted).toBe(0);
    expect((await prune(h.db.sql, { ...base, inboxRetentionSeconds: 30 * DAY })).inboxDeleted).toBe(2);
    const left = await h.db.sql<{ message_key: string }[]>`select message_key from inbox_message`;
    expect(left.map((r) => r.message_key)).toEqual(['recent']);
  });

  it('counts without deleting on a dry run', async () => {
    await seed(['a', 'b']);
    await h.db.sql`update outbox set published_at = now() - interval '8 days'`;
    const result = await prune(h.db.sql, {
      publishedRetentionSeconds: 7 * DAY,
      deadLetterRetentionSeconds: 30 * DAY,
      batchSize: 1,
      timeBudgetMs: 1_000,
      dryRun: true,
    });
    expect(result).toMatchObject({ publishedDeleted: 2, deadLettersDeleted: 0, dryRun: true, batches: [] });
    const [n] = await h.db.sql`select count(*)::int as n from outbox`;
    expect(n?.n).toBe(2);
  });

  it('keeps a dead letter that holds back later events of its aggregate, so `block` still waits for an operator', async () => {
    const events = (aggregateId: string, n: number) =>
      Array.from({ length: n }, (_, i) => ({
        type: 'OrderChanged',
        source: 'shop.orders',
        aggregateType: 'order',
        aggregateId,
        payload: { n: i + 1 },
      }));
    // `held`: 1 dead-lettered 40 days ago, 2 and 3 waiting behind it. `alone`: an old dead letter
    // with nothing behind it yet: under `block` it holds back whatever comes next. `moved-on`: an
    // old dead letter whose successor was published (and pruned): the aggregate has moved past it.
    // `discarded`: an old discarded dead letter, which holds nothing back.
    await h.db.sql.begin((tx) =>
      enqueueMany(tx, [
        ...events('held', 3),
        ...events('alone', 1),
        ...events('moved-on', 2),
        ...events('discarded', 2),
      ]),
    );
    await h.db.sql`
      update outbox set dead_lettered_at = now() - interval '40 days', last_error = 'InvalidArgument: x'
      where sequence = 1`;
    await h.db.sql`
      update outbox set published_at = now() - interval '39 days' where aggregate_id = 'moved-on' and sequence = 2`;
    await h.db
      .sql`update outbox set discarded_at = now() - interval '39 days' where aggregate_id = 'discarded' and sequence = 1`;
    const options = {
      publishedRetentionSeconds: 7 * DAY,
      deadLetterRetentionSeconds: 30 * DAY,
      batchSize: 10,
      timeBudgetMs: 10_000,
    };
    expect(await prune(h.db.sql, { ...options, dryRun: true })).toMatchObject({ deadLettersDeleted: 2 });
    expect(await prune(h.db.sql, options)).toMatchObject({ deadLettersDeleted: 2, publishedDeleted: 1 });
    const left = await h.db.sql<{ aggregate_id: string; sequence: string; dead: boolean }[]>`
      select aggregate_id, sequence, dead_lettered_at is not null as dead from outbox order by aggregate_id, sequence`;
    expect(left.map((r) => `${r.aggregate_id}/${r.sequence}${r.dead ? ' dead' : ''}`)).toEqual([
      'alone/1 dead',
      'discarded/2',
      'held/1 dead',
      'held/2',
      'held/3',
    ]);
    // A later event of `alone` waits behind its dead letter under `block` too.
    await h.db.sql.begin((tx) => enqueueMany(tx, events('alone', 1)));
    // Under `block` the aggregate still waits for the operator: nothing of it is published.
    await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings: testSettings({ deadLetterPolicy: 'block' }),
      once: true,
    });
    expect(h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.aggregateId)).toEqual([
      'discarded',
    ]);
  });

  it('runs alongside a relay without blocking it or losing a row', async () => {
    await seed(Array.from({ length: 3_000 }, (_, i) => `old-${i}`));
    await h.db.sql`update outbox set published_at = now() - interval '10 days'`;
    await seed(Array.from({ length: 2_000 }, (_, i) => `new-${i}`));
    const relaySql = connect({ url: h.db.url, max: 4, env: {} });
    try {
      const [relayed, pruned] = await Promise.all([
        runRelay({
          sql: relaySql,
          client: testClient(h.bus.url),
          settings: testSettings({ batchSize: 50 }),
          untilEmpty: true,
        }),
        prune(h.db.sql, {
          publishedRetentionSeconds: 7 * DAY,
          deadLetterRetentionSeconds: 30 * DAY,
          batchSize: 100,
          timeBudgetMs: 30_000,
        }),
      ]);
      expect(relayed.published).toBe(2_000);
      expect(pruned.publishedDeleted).toBe(3_000);
    } finally {
      await relaySql.end();
    }
    const [row] = await h.db
      .sql`select count(*)::int as n, count(*) filter (where published_at is null)::int as unpublished from outbox`;
    expect(row).toEqual({ n: 2_000, unpublished: 0 });
    expect(
      new Set(h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.aggregateId)).size,
    ).toBe(2_000);
  });
});

describe('monitor Lambda', () => {
  it('prunes and emits the documented metrics as EMF', async () => {
    await seed(['old', 'waiting', 'dead']);
    await h.db.sql`update outbox set published_at = now() - interval '8 days' where aggregate_id = 'old'`;
    await h.db
      .sql`update outbox set created_at = now() - interval '42 seconds' where aggregate_id = 'waiting'`;
    await h.db.sql`update outbox set dead_lettered_at = now() where aggregate_id = 'dead'`;
    // Parked inbox events awaiting an operator, however old: counted, and kept by the pruning.
    await h.db.sql`truncate inbox_message`;
    await h.db.sql`insert into inbox_message (consumer, message_key, outcome, processed_at)
                   values ('billing', 'p-1', 'parked', now() - interval '90 days'), ('billing', 'p-2', 'replaying', now()),
                          ('billing', 'done', 'processed', now())`;
    // Failed inbox events: counted once Lambda's retries are over (5 minutes), not while retried.
    await h.db.sql`truncate inbox_failed`;
    await h.db
      .sql`insert into inbox_failed (consumer, event_id, event, error_name, error_message, last_failed_at)
                   values ('billing', 'f-1', '{}', 'Error', 'x', now() - interval '6 minutes'),
                          ('billing', 'f-2', '{}', 'InboxGapError', 'x', now())`;
    const handler = createMonitorHandler({
      sql: h.db.sql,
      settings: {
        publishedRetentionSeconds: 7 * DAY,
        deadLetterRetentionSeconds: 30 * DAY,
        pruneBatchSize: 10,
        inboxRetentionSeconds: 30 * DAY,
        idempotencyKeyRetentionSeconds: 30 * DAY,
        pruneTimeBudgetMs: 5_000,
        metricNamespace: 'OutboxTest',
      },
    });
    let summary: Awaited<ReturnType<typeof handler>> | undefined;
    const docs = await captureEmf(async () => {
      summary = await handler({}, lambdaContext());
    });
    expect(summary?.status).toMatchObject({ pending: 1, deadLettered: 1, inFlight: 0 });
    expect(docs).toHaveLength(1);
    const doc = docs[0] as {
      _aws: {
        CloudWatchMetrics: {
          Namespace: string;
          Dimensions: string[][];
          Metrics: { Name: string; Unit: string }[];
        }[];
        Timestamp: number;
      };
    } & Record<string, unknown>;
    const directive = doc._aws.CloudWatchMetrics[0];
    expect(directive?.Namespace).toBe('OutboxTest');
    expect(directive?.Dimensions).toEqual([['service']]);
    expect(doc.service).toBe('outbox-monitor');
    expect(directive?.Metrics).toEqual(
      expect.arrayContaining([
        { Name: 'OldestPendingAgeSeconds', Unit: 'Seconds' },
        { Name: 'PendingCount', Unit: 'Count' },
        { Name: 'InFlightCount', Unit: 'Count' },
        { Name: 'DeadLetteredCount', Unit: 'Count' },
        { Name: 'PrunedRows', Unit: 'Count' },
        { Name: 'PruneDuration', Unit: 'Milliseconds' },
        { Name: 'InboxParkedCount', Unit: 'Count' },
        { Name: 'InboxFailedCount', Unit: 'Count' },
      ]),
    );
    expect(doc.InboxParkedCount).toBe(2);
    expect(doc.InboxFailedCount).toBe(1);
    expect(doc.PendingCount).toBe(1);
    expect(doc.DeadLetteredCount).toBe(1);
    expect(doc.PrunedRows).toBe(1);
    expect(doc.OldestPendingAgeSeconds as number).toBeGreaterThanOrEqual(42);
    expect(doc.OldestPendingAgeSeconds as number).toBeLessThan(60);
  });

  it('relay invocations emit published, retried, dead-lettered, lease lost, throttles, back-pressure, lease renewals and PutEvents latency', async () => {
    h.bus.setFaults({ poisonMarker: '"id":"bad"', poisonCode: 'InvalidArgument' });
    await seed(['ok-1', 'ok-2', 'bad']);
    const handler = createRelayHandler({
      relay: createRelay({
        sql: h.db.sql,
        client: testClient(h.bus.url),
        settings: testSettings({ metricNamespace: 'OutboxTest' }),
      }),
    });
    const docs = await captureEmf(() => handler({}, lambdaContext(8_500)));
    expect(docs).toHaveLength(1);
    const doc = docs[0] as Record<string, unknown> & {
      _aws: { CloudWatchMetrics: { Metrics: { Name: string; Unit: string }[] }[] };
    };
    expect(doc._aws.CloudWatchMetrics[0]?.Metrics).toEqual(
      expect.arrayContaining([
        { Name: 'Published', Unit: 'Count' },
        { Name: 'Retried', Unit: 'Count' },
        { Name: 'DeadLettered', Unit: 'Count' },
        { Name: 'LeaseLost', Unit: 'Count' },
        { Name: 'Throttled', Unit: 'Count' },
        { Name: 'BackPressure', Unit: 'Count' },
        { Name: 'LeaseRenewals', Unit: 'Count' },
        { Name: 'PutEventsLatency', Unit: 'Milliseconds' },
      ]),
    );
    expect(doc).toMatchObject({
      service: 'outbox-relay',
      Published: 2,
      DeadLettered: 1,
      Retried: 0,
      LeaseLost: 0,
    });
  });

  it('computes the oldest pending age on the database clock, whatever the time zones', async () => {
    await seed(['tz']);
    await h.db.sql`update outbox set created_at = now() - interval '90 seconds'`;
    const child = spawn(process.execPath, [BIN, 'status', '--json'], {
      env: {
        PATH: process.env.PATH,
        DATABASE_URL: h.db.url,
        TZ: 'Pacific/Chatham',
        PGTZ: 'America/St_Johns',
      },
    });
    let out = '';
    child.stdout.on('data', (d) => {
      out += d;
    });
    await new Promise((r) => child.on('close', r));
    const status = JSON.parse(out);
    expect(status.oldestPendingAgeSeconds).toBeGreaterThanOrEqual(90);
    expect(status.oldestPendingAgeSeconds).toBeLessThan(100);
  });
});

describe('dead-letter operations', () => {
  async function deadLetterOne(id: string) {
    h.bus.setFaults({ poisonMarker: `"id":"${id}"`, poisonCode: 'InvalidArgument' });
    await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings: testSettings(),
      untilEmpty: true,
    });
    h.bus.setFaults({});
  }

  it('replay publishes the dead letter again with the same eventId', async () => {
    await seed(['replay-me']);
    await deadLetterOne('replay-me');
    const [dead] = await listDeadLetters(h.db.sql);
    expect(dead).toMatchObject({ aggregateId: 'replay-me', attempts: 1 });
    expect(dead?.lastError).toMatch(/^InvalidArgument/);
    expect(h.bus.events).toHaveLength(0);

    expect(await replayDeadLetters(h.db.sql, [dead?.id as string])).toBe(1);
    await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings: testSettings(),
      untilEmpty: true,
    });
    expect(h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.eventId)).toEqual([
      dead?.eventId,
    ]);
    expect(await listDeadLetters(h.db.sql)).toEqual([]);
  });

  it('discard keeps the row for audit, never publishes it, and unblocks its aggregate under block', async () => {
    await seed(['x']);
    await seed(['x']);
    h.bus.setFaults({ poisonMarker: '"id":"x"', poisonCode: 'InvalidArgument' });
    const settings = testSettings({ deadLetterPolicy: 'block' });
    await runRelay({ sql: h.db.sql, client: testClient(h.bus.url), settings, once: true });
    h.bus.setFaults({});
    const [dead] = await listDeadLetters(h.db.sql);
    expect(dead?.sequence).toBe('1');
    // Blocked: #2 waits behind the dead letter.
    await runRelay({ sql: h.db.sql, client: testClient(h.bus.url), settings, once: true });
    expect(h.bus.events).toHaveLength(0);

    const { ids } = await resolveDeadLetterIds(h.db.sql, [dead?.eventId as string]);
    expect(await discardDeadLetters(h.db.sql, ids)).toBe(1);
    await h.db.sql`update outbox set available_at = now()`;
    await runRelay({ sql: h.db.sql, client: testClient(h.bus.url), settings, untilEmpty: true });
    expect(h.bus.events.map((e) => (e.detail as unknown as Envelope).metadata.sequence)).toEqual([2]);
    const [row] = await h.db
      .sql`select discarded_at is not null as discarded, published_at from outbox where sequence = 1`;
    expect(row).toEqual({ discarded: true, published_at: null });
    expect(await listDeadLetters(h.db.sql)).toEqual([]);
    expect(await listDeadLetters(h.db.sql, { includeDiscarded: true })).toHaveLength(1);
  });

  it('the CLI lists, shows, refuses to act on several rows without --yes, and replays with it', async () => {
    await seed(['c1', 'c2'], 'cart');
    h.bus.setFaults({ poisonMarker: 'InvalidEverything', poisonCode: 'InvalidArgument' });
    await h.db.sql`update outbox set payload = '{"note": "InvalidEverything"}'`;
    await runRelay({
      sql: h.db.sql,
      client: testClient(h.bus.url),
      settings: testSettings(),
      untilEmpty: true,
    });
    h.bus.setFaults({});
    const run = (args: string[]) =>
      new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
        const child = spawn(process.execPath, [BIN, ...args], {
          env: { PATH: process.env.PATH, DATABASE_URL: h.db.url },
        });
        let out = '';
        let err = '';
        child.stdout.on('data', (d) => {
          out += d;
        });
        child.stderr.on('data', (d) => {
          err += d;
        });
        child.stdin.end();
        child.on('close', (code) => resolve({ code, out, err }));
      });
    const list = await run(['dead-letters', 'list', '--aggregate', 'cart', '--since', '1h', '--json']);
    const rows = JSON.parse(list.out);
    expect(rows.map((r: { aggregateId: string }) => r.aggregateId)).toEqual(['c1', 'c2']);
    const show = await run(['dead-letters', 'show', rows[0].eventId, '--json']);
    expect(JSON.parse(show.out)).toMatchObject({
      aggregateId: 'c1',
      payload: { note: 'InvalidEverything' },
      attempts: 1,
    });
    const refused = await run(['dead-letters', 'replay', '--all', '--aggregate', 'cart']);
    expect(refused.code).toBe(1);
    expect(refused.err).toContain('not confirmed: nothing was changed');
    expect(await listDeadLetters(h.db.sql)).toHaveLength(2);
    const replayed = await run(['dead-letters', 'replay', '--all', '--aggregate', 'cart', '--yes']);
    expect(replayed.out.trim()).toBe('replayed 2 dead letter(s)');
    expect(await listDeadLetters(h.db.sql)).toHaveLength(0);
    const unknown = await run(['dead-letters', 'discard', '999999']);
    expect(unknown).toMatchObject({ code: 1 });
    expect(unknown.err).toContain('no dead letter with id 999999');
  });
});
