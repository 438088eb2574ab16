/**
 * The baseline: the outbox relay as it is usually first written. Claim a batch, then for each row
 * one PutEvents call and one UPDATE, sequentially. Correct enough for a demo; here only to be
 * compared with.
 *
 * `node bench/naive-relay.ts <budgetMs>` runs it as a process of its own (the bench measures its
 * CPU like the relay's): DATABASE_URL, EVENT_BUS_NAME and the SDK's AWS_* variables; prints
 * `{"published": n, "ms": run time}` as JSON.
 */
import { type EventBridgeClient, PutEventsCommand } from '@aws-sdk/client-eventbridge';
import postgres from 'postgres';
import type { Sql } from '../shared/platform/index.ts';
import { createEventBridgeClient } from '../shared/relay/index.ts';

/** Relays until no row is left or `budgetMs` is spent; returns how many rows it published. */
export async function runNaiveRelay(
  sql: Sql,
  client: EventBridgeClient,
  busName: string,
  budgetMs: number,
): Promise<number> {
  const started = performance.now();
  let published = 0;
  for (;;) {
    if (performance.now() - started > budgetMs) return published;
    const rows = await sql<
      {
        id: string;
        event_id: string;
        aggregate_type: string;
        aggregate_id: string;
        sequence: string;
        event_type: string;
        source: string;
        payload: unknown;
        created_at: Date;
      }[]
    >`
      select id, event_id, aggregate_type, aggregate_id, sequence, event_type, source, payload, created_at
      from outbox.outbox where published_at is null order by id limit 100`;
    if (rows.length === 0) return published;
    for (const row of rows) {
      if (performance.now() - started > budgetMs) return published;
      await client.send(
        new PutEventsCommand({
          Entries: [
            {
              EventBusName: busName,
              Source: row.source,
              DetailType: row.event_type,
              Time: row.created_at,
              Detail: JSON.stringify({
                metadata: {
                  eventId: row.event_id,
                  aggregateType: row.aggregate_type,
                  aggregateId: row.aggregate_id,
                  sequence: Number(row.sequence),
                },
                data: row.payload,
              }),
            },
          ],
        }),
      );
      await sql`update outbox.outbox set published_at = now() where id = ${row.id}`;
      published++;
    }
  }
}

if (import.meta.main) {
  const budgetMs = Number(process.argv[2] ?? 10_000);
  const sql = postgres(process.env.DATABASE_URL as string, { max: 2, onnotice: () => {} });
  const client = createEventBridgeClient();
  await sql`select 1`;
  const started = performance.now();
  const published = await runNaiveRelay(sql, client, process.env.EVENT_BUS_NAME ?? 'bench-bus', budgetMs);
  const ms = performance.now() - started;
  await sql.end();
  process.stdout.write(`${JSON.stringify({ published, ms })}\n`);
}
