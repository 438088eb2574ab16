/**
 * The chaos suite's producers, in a process of their own: commits (and rolls back) batches of
 * events for many aggregates through the real `enqueueMany`, in 4 concurrent transactions, until
 * `--events` were offered. Writes JSON lines on stdout: `{"offered":n}` every 200 events,
 * `{"rolledBack":[eventId…]}` for each rolled-back batch, and `{"done":true,"offered":n}` last.
 *
 * Why a process: the driver (porsager/postgres#1154) can throw an uncaught TypeError when a
 * transaction's connection drops (during the suite's Postgres restart). A long-running producer
 * installs the outbox's guard (`ignoreTransientDriverRejections`); inside the test runner the
 * runner's own listener would report the TypeError as a failure whatever the guard does.
 */
import { randomInt } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import {
  ignoreTransientDriverRejections,
  isConnectionFailure,
  isTransientDatabaseError,
  openPool,
  withDeadline,
} from '../../shared/platform/index.ts';
import { enqueueMany, type OutboxEvent } from '../../shared/producer/index.ts';

const { values } = parseArgs({
  options: {
    url: { type: 'string' },
    events: { type: 'string', default: '1000' },
    aggregates: { type: 'string', default: '100' },
    'rollback-rate': { type: 'string', default: '0.1' },
    'poison-rate': { type: 'string', default: '0' },
    poison: { type: 'string', default: 'chaos-poison-pill' },
  },
});
const url = values.url;
if (!url) throw new Error('--url is required');
const total = Number(values.events);
const aggregates = Number(values.aggregates);
const rollbackRate = Number(values['rollback-rate']);
const poisonRate = Number(values['poison-rate']);
const send = (message: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(message)}\n`);

ignoreTransientDriverRejections(() => {});
// Replaced after a connection failure: the driver can leave a dead connection's slot unusable.
const pool = openPool({ url, max: 4, env: {}, applicationName: 'chaos-producer' });

class RollBack extends Error {}

let offered = 0;
let reported = 0;
const producer = async () => {
  while (offered < total) {
    const size = Math.min(randomInt(1, 21), total - offered);
    offered += size;
    const events: OutboxEvent[] = Array.from({ length: size }, () => {
      const poison = Math.random() < poisonRate;
      return {
        type: 'ChaosEvent',
        source: 'chaos.driver',
        aggregateType: 'agg',
        aggregateId: String(randomInt(0, aggregates)),
        payload: poison ? { note: values.poison } : { n: offered },
      };
    });
    const rollBack = Math.random() < rollbackRate;
    const generation = pool.generation;
    try {
      await withDeadline(
        pool.sql.begin(async (tx) => {
          const results = await enqueueMany(tx, events);
          if (rollBack) {
            send({ rolledBack: results.map((r) => r.eventId) });
            throw new RollBack();
          }
        }),
        'enqueue',
        10_000,
      );
    } catch (error) {
      if (error instanceof RollBack) continue;
      // Postgres went away mid-transaction: the commit's fate is read from the table at the end.
      if (!isTransientDatabaseError(error)) throw error;
      if (isConnectionFailure(error)) pool.replace(generation);
      await sleep(100);
    }
    if (offered - reported >= 200) {
      reported = offered;
      send({ offered });
    }
  }
};
await Promise.all(Array.from({ length: 4 }, producer));
send({ done: true, offered });
await pool.end(2);
process.exit(0);
