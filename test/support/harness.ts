/**
 * The common fixture of the integration suites: a migrated database of the file's own and a local
 * bus, both emptied before each test.
 */
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { createTestDatabase, type TestDatabase } from './db.ts';

/** Filled in by the hooks; read it inside tests. */
export interface Harness {
  db: TestDatabase;
  bus: LocalBus;
}

/** Registers the hooks and returns the harness they fill in. */
export function useHarness(options: { max?: number; truncate?: string } = {}): Harness {
  const harness = {} as Harness;
  beforeAll(async () => {
    harness.db = await createTestDatabase({ max: options.max ?? 10 });
    harness.bus = await startLocalBus();
  });
  afterAll(async () => {
    await harness.db?.drop();
    await harness.bus?.close();
  });
  beforeEach(async () => {
    await harness.db.sql.unsafe(
      `truncate ${options.truncate ?? 'outbox, outbox_aggregate, outbox_idempotency_key'}`,
    );
    harness.bus.reset();
    harness.bus.setFaults({});
  });
  return harness;
}
