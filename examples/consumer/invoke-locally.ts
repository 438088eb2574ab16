// invoke-locally.ts: node invoke-locally.ts [event.json]. Invokes the handler once, as Lambda
// would, with the saved event, then closes the pool so that the process exits.
import { readFile } from 'node:fs/promises';
import type { Context } from 'aws-lambda';
import { handler, pool } from './handler.ts';

const event = JSON.parse(await readFile(process.argv[2] ?? new URL('./event.json', import.meta.url), 'utf8'));
try {
  console.log(await handler(event, { getRemainingTimeInMillis: () => 30_000 } as Context));
} finally {
  await pool.end(); // without it the pool's open connection keeps Node running
}
