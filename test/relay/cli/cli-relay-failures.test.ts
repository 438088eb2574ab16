/**
 * Publish failures are visible in `outbox relay`: each distinct reason with its count as it
 * happens, a summary by reason, and a one-shot run that published nothing because every attempt
 * failed exits 1.
 */
import { describe, expect, it } from 'vitest';
import { enqueueMany } from '../../../shared/producer/index.ts';
import { cliEnv, collect, runCli, startCli, waitForOutput } from '../../support/cli.ts';
import { useHarness } from '../../support/harness.ts';

const h = useHarness({ max: 4 });

/** The configuration contract's environment, pointing at the test database and local bus. */
const env = (extra: Record<string, string | undefined> = {}) =>
  cliEnv(h, { OUTBOX_BACKOFF_BASE_MS: '10', OUTBOX_BACKOFF_MAX_MS: '50', ...extra });

async function seed(ids: string[]) {
  await h.db.sql.begin((tx) =>
    enqueueMany(
      tx,
      ids.map((id) => ({ type: 'T', source: 's', aggregateType: 'x', aggregateId: id, payload: { id } })),
    ),
  );
}

describe('outbox relay: failures are visible', () => {
  it('--once that published nothing because the endpoint is unreachable prints the reason with a count and exits 1', async () => {
    await seed(['a', 'b', 'c']);
    const r = await runCli(['relay', '--once'], {
      env: env({ AWS_ENDPOINT_URL_EVENTBRIDGE: 'http://127.0.0.1:9' }),
    });
    expect(r.stderr).toMatch(/^relay: publish failed: .*ECONNREFUSED.* \(will retry\)$/m);
    expect(r.stdout).toMatch(/published 0, retried 3/);
    expect(r.stdout).toMatch(/^failures by reason:\n {2}3 failed \(3 retried\): .*ECONNREFUSED/m);
    expect(r.stderr).toMatch(
      /^error: nothing was published: every attempt failed \(the reasons are above\)\. Retried events stay in the outbox for the next run\. The bus endpoint did not answer: is AWS_ENDPOINT_URL_EVENTBRIDGE=http:\/\/127\.0\.0\.1:9 right, and is it running \(`npx outbox bus` for the local one\)\?$/m,
    );
    expect(r.code).toBe(1);
  });

  it('--until-empty gives up after passes in a row in which every event failed, and exits 1', async () => {
    await seed(['a', 'b']);
    h.bus.setFaults({ entryFailureRate: 1, entryFailureCode: 'InternalFailure' });
    const r = await runCli(['relay', '--until-empty'], { env: env() });
    expect(r.stderr).toMatch(/^relay: publish failed: InternalFailure: .* \(will retry\)$/m);
    expect(r.stderr).toMatch(/^relay: giving up after 5 passes in a row in which every event failed$/m);
    expect(r.stdout).toMatch(/^relay stopped \(gave up\) .*published 0, retried \d+/m);
    expect(r.stdout).toMatch(/^ {2}\d+ failed \(\d+ retried\): InternalFailure: /m);
    expect(r.code).toBe(1);
    const [row] = await h.db.sql`select count(*)::int as n from outbox where published_at is null`;
    expect(row?.n).toBe(2);
  }, 60_000);

  it('--until-empty that gives up with an event still pending exits 1, even after publishing others', async () => {
    await seed(['ok-1', 'stuck', 'ok-2']);
    h.bus.setFaults({ poisonMarker: '"id":"stuck"', poisonCode: 'InternalFailure' });
    const r = await runCli(['relay', '--until-empty', '--json'], { env: env() });
    expect(JSON.parse(r.stdout)).toMatchObject({ stopReason: 'gave up', published: 2 });
    expect(r.stderr).toMatch(/^error: the outbox is not empty: /m);
    expect(r.code).toBe(1);
  }, 60_000);

  it('a run that published some events and dead-lettered one names the reason and exits 0', async () => {
    await seed(['ok-1', 'poison', 'ok-2']);
    h.bus.setFaults({ poisonMarker: '"id":"poison"', poisonCode: 'InvalidArgument' });
    const r = await runCli(['relay', '--until-empty'], { env: env() });
    expect(r.stderr).toMatch(/^relay: publish failed: InvalidArgument: .* \(dead-lettered\)$/m);
    expect(r.stdout).toMatch(/published 2, retried 0, dead-lettered 1/);
    expect(r.stdout).toMatch(/^ {2}1 failed \(1 dead-lettered\): InvalidArgument: /m);
    expect(r.code).toBe(0);
  });

  it('--json prints one document with the counts and the failures by reason', async () => {
    await seed(['ok', 'poison']);
    h.bus.setFaults({ poisonMarker: '"id":"poison"', poisonCode: 'InvalidArgument' });
    const r = await runCli(['relay', '--until-empty', '--json'], { env: env() });
    expect(r.code).toBe(0);
    const summary = JSON.parse(r.stdout);
    expect(summary).toMatchObject({ stopReason: 'empty', published: 1, deadLettered: 1, retried: 0 });
    expect(summary.failures).toEqual([
      { reason: expect.stringMatching(/^InvalidArgument: /), count: 1, retried: 0, deadLettered: 1 },
    ]);
  });

  it('the looping relay prints each reason as it happens and the growing count, and Ctrl-C stops it with 0', async () => {
    await seed(['a', 'b', 'c']);
    h.bus.setFaults({ entryFailureRate: 1, entryFailureCode: 'InternalFailure' });
    const child = startCli(['relay'], { env: env() });
    const run = collect(child);
    await waitForOutput(() => run.output().stderr, /^relay: publish failed: InternalFailure: /m);
    await waitForOutput(
      () => run.output().stderr,
      /^relay: \d+ failed \(\d+ retried.*\) so far: InternalFailure: /m,
    );
    child.kill('SIGINT');
    const r = await run;
    expect(r.code).toBe(0);
    // An operator's Ctrl-C is no failure: the summary says interrupted, not aborted.
    expect(r.stdout).toMatch(/^relay stopped \(interrupted\) after [\d.]+ s: published \d+, /m);
    expect(r.stdout).not.toMatch(/aborted/);
    expect(r.stdout).toMatch(/^ {2}\d+ failed \(\d+ retried.*\): InternalFailure: /m);
  });
});

describe('outbox relay --until-empty under the block policy', () => {
  it('returns once nothing claimable is left, says how many events wait behind dead letters, and exits 1', async () => {
    await h.db.sql.begin((tx) =>
      enqueueMany(tx, [
        { type: 'T', source: 's', aggregateType: 'x', aggregateId: 'stuck', payload: { id: 'poison' } },
        { type: 'T', source: 's', aggregateType: 'x', aggregateId: 'stuck', payload: { id: 'behind-1' } },
        { type: 'T', source: 's', aggregateType: 'x', aggregateId: 'stuck', payload: { id: 'behind-2' } },
        { type: 'T', source: 's', aggregateType: 'x', aggregateId: 'free', payload: { id: 'free-1' } },
        { type: 'T', source: 's', aggregateType: 'x', aggregateId: 'free', payload: { id: 'free-2' } },
      ]),
    );
    h.bus.setFaults({ poisonMarker: '"id":"poison"', poisonCode: 'InvalidArgument' });
    const started = Date.now();
    const r = await runCli(['relay', '--until-empty', '--json'], {
      env: env({ OUTBOX_DEAD_LETTER_POLICY: 'block' }),
    });
    expect(r.signal).toBeNull();
    expect(Date.now() - started).toBeLessThan(30_000);
    expect(JSON.parse(r.stdout)).toMatchObject({
      stopReason: 'held back',
      published: 2,
      deadLettered: 1,
      heldBack: { events: 2, aggregates: 1 },
    });
    expect(r.stderr).toMatch(
      /^error: 2 event\(s\) of 1 aggregate\(s\) wait behind dead letters \(OUTBOX_DEAD_LETTER_POLICY=block\)/m,
    );
    expect(r.code).toBe(1);
    expect(h.bus.events.map((e) => (e.detail as { data: { id: string } }).data.id).sort()).toEqual([
      'free-1',
      'free-2',
    ]);

    // Without --json: the summary line says the same.
    const again = await runCli(['relay', '--until-empty'], {
      env: env({ OUTBOX_DEAD_LETTER_POLICY: 'block' }),
    });
    expect(again.stdout).toMatch(/^relay stopped \(held back\) /m);
    expect(again.code).toBe(1);

    // Under `continue` the same backlog is claimable: nothing is held back.
    h.bus.setFaults({});
    const cont = await runCli(['relay', '--until-empty', '--json'], { env: env() });
    expect(JSON.parse(cont.stdout)).toMatchObject({ stopReason: 'empty', published: 2 });
    expect(cont.code).toBe(0);
  }, 60_000);
});
