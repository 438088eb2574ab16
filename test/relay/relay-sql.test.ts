/**
 * The relay's shared row conditions stay equal to the predicates of the partial indexes that serve
 * them: a drift would not fail any query, it would only make the claim scan the published history.
 */
import { describe, expect, it } from 'vitest';
import { pendingRow, unpublishedRow } from '../../shared/relay/sql/index.ts';
import { useHarness } from '../support/harness.ts';

const h = useHarness({ max: 2 });

/** The WHERE clause of an index definition, as Postgres prints it (normalised). */
const predicate = (indexdef: string) => {
  const at = indexdef.indexOf(' WHERE ');
  return at < 0 ? undefined : indexdef.slice(at + ' WHERE '.length);
};

class Rollback extends Error {}

describe('relay SQL', () => {
  it('writes the pending-row and unpublished-row conditions exactly as the partial indexes do', async () => {
    let definitions: { indexname: string; indexdef: string }[] = [];
    // Postgres normalises a predicate when it stores an index; building probe indexes from our
    // fragments and reading both back from pg_indexes compares like with like.
    await h.db.sql
      .begin(async (tx) => {
        await tx`create index relay_probe_pending on outbox (id) where ${pendingRow(tx)}`;
        await tx`create index relay_probe_unpublished on outbox (id) where ${unpublishedRow(tx)}`;
        definitions = await tx<{ indexname: string; indexdef: string }[]>`
          select indexname, indexdef from pg_indexes where schemaname = 'outbox' and tablename = 'outbox'`;
        throw new Rollback();
      })
      .catch((error: unknown) => {
        if (!(error instanceof Rollback)) throw error;
      });
    const where = new Map(definitions.map((d) => [d.indexname, predicate(d.indexdef)]));
    const pending = where.get('relay_probe_pending');
    const unpublished = where.get('relay_probe_unpublished');
    expect(pending).toBe('((published_at IS NULL) AND (dead_lettered_at IS NULL))');
    expect(where.get('outbox_pending_idx')).toBe(pending);
    // Parking needs no index of its own (migration 013 dropped migration 002's): it reads the
    // range of outbox_pending_idx the head walk covered, with the head test of the walk.
    expect(where.has('outbox_pending_by_aggregate_available_idx')).toBe(false);
    expect(where.get('outbox_unfinished_by_aggregate_idx')).toBe(unpublished);
  });

  it('lets the claim find heads through the pending index', async () => {
    // With sequential scans priced out, a plan that cannot use the partial index shows it here.
    const plan = await h.db.sql.begin(async (tx) => {
      await tx`set local enable_seqscan = off`;
      return tx<{ 'QUERY PLAN': string }[]>`
        explain select id from outbox where ${pendingRow(tx)} and available_at <= now()
        order by available_at, id limit 10`;
    });
    expect(plan.map((r) => r['QUERY PLAN']).join('\n')).toMatch(/outbox_pending_idx/);
  });
});
