/** One batch of forgetting idempotency keys. */
import type { Queryable } from '../../../platform/index.ts';

/**
 * Deletes up to `batchSize` idempotency keys older than the retention (seconds) whose event has
 * left the outbox, oldest first. No producer writes an expired key (a repeat of it reads it and
 * writes nothing), so the only race is a repeat arriving while the key is deleted: it then
 * enqueues anew, which is what the window's end means. The key row records its event's row id
 * (`outbox_id`, migration 011; NULL for a key whose event had left the outbox before it), found
 * through the primary key (key, producer role, source: migration 023).
 * @returns keys deleted
 */
export async function deleteIdempotencyKeys(
  sql: Queryable,
  retentionSeconds: number,
  batchSize: number,
): Promise<number> {
  const r = await sql`
    delete from outbox_idempotency_key k
    using (
      select idempotency_key, producer, source from outbox_idempotency_key old
      where created_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})
        and not exists (select from outbox o where o.id = old.outbox_id)
      order by created_at
      limit ${batchSize}
    ) expired
    where (k.idempotency_key, k.producer, k.source) = (expired.idempotency_key, expired.producer, expired.source)
      and k.created_at < now() - pg_catalog.make_interval(secs => ${retentionSeconds})
      and not exists (select from outbox o where o.id = k.outbox_id)`;
  return r.count;
}
