/**
 * The relay's start-up check of its bus client (region and credentials resolve) is kept once it
 * passed, but not once it failed: a credentials provider that timed out once (instance metadata,
 * a container endpoint) left a warm relay failing every run until its process was recycled
 * (found by the breaker, issue 48's follow-up).
 */
import { describe, expect, it } from 'vitest';
import { enqueueMany } from '../../shared/producer/index.ts';
import { eventBridgePublisher } from '../../shared/relay/buses/index.ts';
import { createRelay } from '../../shared/relay/index.ts';
import { useHarness } from '../support/harness.ts';
import { testClient, testSettings } from '../support/relay.ts';

const h = useHarness({ max: 4 });

describe("the relay's client check", () => {
  it('is asked again at the next run after it failed, and once only after it passed', async () => {
    const settings = testSettings();
    const base = eventBridgePublisher(testClient(h.bus.url), settings);
    let checks = 0;
    const relay = createRelay({
      sql: h.db.sql,
      settings,
      publisher: {
        ...base,
        check: async () => {
          checks++;
          if (checks === 1) throw new Error('Could not load credentials from any providers (timed out)');
        },
      },
    });
    try {
      await h.db.sql.begin((tx) =>
        enqueueMany(tx, [
          {
            type: 'OrderPlaced',
            source: 'shop.orders',
            aggregateType: 'order',
            aggregateId: 'o-1',
            payload: {},
          },
        ]),
      );
      await expect(relay.run({ untilEmpty: true })).rejects.toThrow(/credentials/);
      expect(h.bus.events).toHaveLength(0);
      expect((await relay.run({ untilEmpty: true })).published).toBe(1);
      expect((await relay.run({ untilEmpty: true })).published).toBe(0);
      expect(checks).toBe(2);
      expect(h.bus.events).toHaveLength(1);
    } finally {
      await relay.close();
    }
  });
});
