/**
 * The plain outbox design the db-cost bench compares this project with (the job-outbox article in
 * the reference reading): one table, a partial index on unpublished rows, a claim with
 * `FOR UPDATE SKIP LOCKED` and the mark in the same transaction, pruning by batched DELETE. No
 * per-aggregate order, no lease (the claim's transaction holds the rows while they are sent), no
 * idempotency keys, no validation: what it costs is the floor an outbox pays.
 *
 * Its relay sends each claimed batch to the same bus, through the same client, as ours does.
 */

import type { EventBridgeClient } from '@aws-sdk/client-eventbridge';
import { PutEventsCommand, type PutEventsRequestEntry } from '@aws-sdk/client-eventbridge';
import type { Queryable, Sql } from '../shared/platform/index.ts';

/** Creates (or re-creates, empty) the plain outbox table and its partial index. */
export async function setUpPlainOutbox(sql: Sql): Promise<void> {
  await sql.unsafe(`
    drop table if exists plain_outbox;
    create table plain_outbox (
      id           bigserial   primary key,
      queue        text        not null,
      task         text        not null,
      payload      jsonb       not null,
      dedup_key    text        not null,
      created_at   timestamptz not null default now(),
      published_at timestamptz,
      attempts     int         not null default 0
    );
    create index plain_outbox_pending on plain_outbox (id) where published_at is null;
  `);
}

/** One event as the plain design stores it. */
export interface PlainEvent {
  source: string;
  type: string;
  payload: Record<string, unknown>;
  /** What consumers deduplicate on; here the event's uuid. */
  dedupKey: string;
}

/** The plain enqueue: one INSERT, in the caller's transaction. */
export async function plainEnqueue(tx: Queryable, e: PlainEvent): Promise<void> {
  await tx`
    insert into plain_outbox (queue, task, payload, dedup_key)
    values (${e.source}, ${e.type}, ${tx.json(e.payload as never)}, ${e.dedupKey})`;
}

/**
 * Drains the plain outbox: in one transaction, claim up to `batchSize` rows oldest first (SKIP
 * LOCKED), send them in PutEvents calls of 10 entries, mark the batch published.
 * @returns rows published
 * @throws when an entry fails (the bench's bus accepts everything)
 */
export async function plainRelayDrain(
  sql: Sql,
  client: EventBridgeClient,
  eventBusName: string,
  batchSize = 100,
): Promise<number> {
  let total = 0;
  for (;;) {
    const n = await sql.begin(async (tx) => {
      const rows = await tx<
        { id: string; queue: string; task: string; payload: string; dedup_key: string }[]
      >`
        select id, queue, task, payload::text as payload, dedup_key from plain_outbox
        where published_at is null
        order by id
        limit ${batchSize}
        for update skip locked`;
      if (rows.length === 0) return 0;
      const calls = [];
      for (let i = 0; i < rows.length; i += 10) {
        const entries: PutEventsRequestEntry[] = rows.slice(i, i + 10).map((r) => ({
          EventBusName: eventBusName,
          Source: r.queue,
          DetailType: r.task,
          Detail: `{"dedupKey":${JSON.stringify(r.dedup_key)},"data":${r.payload}}`,
        }));
        calls.push(client.send(new PutEventsCommand({ Entries: entries })));
      }
      for (const answer of await Promise.all(calls)) {
        if (answer.FailedEntryCount)
          throw new Error(`plain relay: ${answer.FailedEntryCount} entries failed`);
      }
      await tx`
        update plain_outbox set published_at = now(), attempts = attempts + 1
        where id = any(${rows.map((r) => r.id)}::int8[])`;
      return rows.length;
    });
    if (n === 0) return total;
    total += n;
  }
}

/** The plain prune: DELETE published rows older than the retention, `batchSize` at a time. */
export async function plainPrune(sql: Sql, retentionSeconds: number, batchSize = 1_000): Promise<number> {
  let total = 0;
  for (;;) {
    const r = await sql`
      delete from plain_outbox
      where id = any(array(
        select id from plain_outbox
        where published_at < now() - make_interval(secs => ${retentionSeconds})
        order by id
        limit ${batchSize}))`;
    if (r.count === 0) return total;
    total += r.count;
  }
}
