/**
 * `--since` selects dead letters by the database's clock: `dead_lettered_at` is written with the
 * database's `now()`, so a duration is counted back from that `now()`, never from the clock of the
 * machine that runs the CLI, and a date-time is an instant whatever that machine's time zone.
 */
import { describe, expect, it } from 'vitest';
import { OutboxValidationError } from '../../../shared/platform/index.ts';
import { enqueueMany } from '../../../shared/producer/index.ts';
import { findDeadLetterIds, listDeadLetters } from '../../../shared/relay/operations/index.ts';
import { cliEnv, runCli } from '../../support/cli.ts';
import { useHarness } from '../../support/harness.ts';

const h = useHarness({ max: 4 });

/**
 * A module preloaded into the CLI's process that moves its clock two hours ahead of the database's,
 * as on an operator's laptop whose clock is wrong (`Date.now()` and `new Date()`; dates built from
 * a value are left alone, so the driver still reads the database's timestamps as they are).
 */
const CLOCK_AHEAD_2H = `data:text/javascript,${encodeURIComponent(`
  const Real = globalThis.Date;
  const skew = 2 * 3600 * 1000;
  class Skewed extends Real {
    constructor(...args) { if (args.length === 0) super(Real.now() + skew); else super(...args); }
    static now() { return Real.now() + skew; }
  }
  globalThis.Date = Skewed;
`)}`;

/** Three dead letters: 20 minutes, 3 hours and 2 days old by the database's clock. */
async function seedDeadLetters() {
  await h.db.sql.begin((tx) =>
    enqueueMany(
      tx,
      ['recent', 'hours', 'days'].map((id) => ({
        type: 'T',
        source: 's',
        aggregateType: 'since',
        aggregateId: id,
        payload: { id },
      })),
    ),
  );
  await h.db.sql`
    update outbox set last_error = 'InvalidArgument: test', attempts = 1,
      dead_lettered_at = now() - case aggregate_id
        when 'recent' then interval '20 minutes' when 'hours' then interval '3 hours' else interval '2 days' end`;
}

const listed = (stdout: string) =>
  (JSON.parse(stdout) as { aggregateId: string }[]).map((r) => r.aggregateId).sort();

describe('dead letters --since', () => {
  it('counts a duration back from the database clock, not from the clock of the machine running the CLI', async () => {
    await seedDeadLetters();
    const env = cliEnv(h, { NODE_OPTIONS: `--import=${CLOCK_AHEAD_2H}` });
    const list = await runCli(['dead-letters', 'list', '--since', '1h', '--json'], { env });
    expect(list.stderr).toBe('');
    expect(listed(list.stdout)).toEqual(['recent']);

    const replay = await runCli(['dead-letters', 'replay', '--all', '--since', '4h', '--yes', '--json'], {
      env,
    });
    expect(JSON.parse(replay.stdout)).toEqual({ replayed: 2 });
    const left = await listDeadLetters(h.db.sql);
    expect(left.map((d) => d.aggregateId)).toEqual(['days']);
  });

  it('refuses a date-time without a time zone instead of reading it in the local one, and takes one with an offset as that instant', async () => {
    await seedDeadLetters();
    const [at] = await h.db.sql<{ utc: string; tokyo: string }[]>`
      select to_char((now() - interval '1 hour') at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') as utc,
             to_char((now() - interval '1 hour') at time zone 'Asia/Tokyo', 'YYYY-MM-DD"T"HH24:MI:SS') as tokyo`;
    const env = cliEnv(h, { TZ: 'Asia/Tokyo' });

    const bare = await runCli(['dead-letters', 'list', '--since', at?.utc as string, '--json'], { env });
    expect(bare.code).toBe(2);
    expect(bare.stderr).toMatch(/'--since <when>' argument '.*' is invalid\. .*no time zone.*Z.*\+01:00/);
    expect(bare.stdout).toBe('');

    const utc = await runCli(['dead-letters', 'list', '--since', `${at?.utc}Z`, '--json'], { env });
    expect(listed(utc.stdout)).toEqual(['recent']);
    const tokyo = await runCli(['dead-letters', 'list', '--since', `${at?.tokyo}+09:00`, '--json'], { env });
    expect(listed(tokyo.stdout)).toEqual(['recent']);
  });

  it('reads a date alone as midnight UTC', async () => {
    await seedDeadLetters();
    await h.db.sql`update outbox set dead_lettered_at = '2026-03-01T00:30:00Z' where aggregate_id = 'recent'`;
    await h.db.sql`update outbox set dead_lettered_at = '2026-02-28T23:30:00Z' where aggregate_id = 'hours'`;
    await h.db.sql`update outbox set dead_lettered_at = '2026-02-01T00:00:00Z' where aggregate_id = 'days'`;
    const r = await runCli(['dead-letters', 'list', '--since', '2026-03-01', '--json'], {
      env: cliEnv(h, { TZ: 'America/Los_Angeles' }),
    });
    expect(listed(r.stdout)).toEqual(['recent']);
  });

  it('takes a duration as seconds before the database now() in the library too', async () => {
    await seedDeadLetters();
    const ids = await findDeadLetterIds(h.db.sql, { since: { secondsAgo: 3_600 } });
    expect(ids).toHaveLength(1);
    const rows = await listDeadLetters(h.db.sql, { since: { secondsAgo: 4 * 3_600 } });
    expect(rows.map((r) => r.aggregateId).sort()).toEqual(['hours', 'recent']);
    await expect(listDeadLetters(h.db.sql, { since: { secondsAgo: -1 } })).rejects.toThrow(
      OutboxValidationError,
    );
  });
});

describe('parseSince', () => {
  it('reads offsets in every ISO spelling, and refuses impossible dates', async () => {
    const { parseSince } = await import('../../../shared/platform/cli/parsers.ts');
    expect(parseSince('2026-11-30T10:00+0100')).toEqual(new Date('2026-11-30T09:00:00Z'));
    expect(parseSince('2026-11-30 04:00:00.250-05')).toEqual(new Date('2026-11-30T09:00:00.250Z'));
    expect(parseSince('2026-11-30t09:00z')).toEqual(new Date('2026-11-30T09:00:00Z'));
    expect(parseSince('36h')).toEqual({ secondsAgo: 129_600 });
    expect(() => parseSince('2026-02-30')).toThrow(/not a valid date/);
    expect(() => parseSince('2026-11-30T25:00Z')).toThrow(/not a valid date/);
    expect(() => parseSince('yesterday')).toThrow(/duration back from now on the database clock/);
  });
});
