/**
 * `npm run test:chaos`: the long chaos run. Defaults: 50,000 events, 4 relay processes, 25 kills,
 * one Postgres restart, faults on, and the relays at the product's default settings (lease
 * included); `--lease-seconds N` sets OUTBOX_LEASE_SECONDS instead. Prints the report as a markdown
 * table and exits non-zero when a guarantee was broken.
 */
import { writeFile } from 'node:fs/promises';
import { parseArgs } from 'node:util';
import { formatReport, passed, runChaos } from './chaos.ts';

const { values } = parseArgs({
  options: {
    events: { type: 'string', default: '50000' },
    relays: { type: 'string', default: '4' },
    kills: { type: 'string', default: '25' },
    aggregates: { type: 'string', default: '2000' },
    'no-restart': { type: 'boolean', default: false },
    'lease-seconds': { type: 'string' },
    json: { type: 'string' },
  },
});
const options = {
  events: Number(values.events),
  relays: Number(values.relays),
  kills: Number(values.kills),
  aggregates: Number(values.aggregates),
  restartPostgres: !values['no-restart'],
  rollbackRate: 0.1,
  poisonRate: 0.002,
  drainTimeoutMs: 600_000,
  leaseSeconds: values['lease-seconds'] === undefined ? undefined : Number(values['lease-seconds']),
  log: (line: string) => process.stderr.write(`${new Date().toISOString().slice(11, 19)} ${line}\n`),
};
const report = await runChaos(options);
process.stdout.write(`${formatReport(report, options)}\n`);
if (values.json)
  await writeFile(values.json, JSON.stringify({ options: { ...options, log: undefined }, report }, null, 2));
process.exit(passed(report) ? 0 : 1);
