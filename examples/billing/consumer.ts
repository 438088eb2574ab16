/**
 * Example consumer: a billing Lambda, target of an EventBridge rule on `source: demo.shop` and
 * `detail-type: OrderPlaced`. It creates one invoice per order, exactly once, through the inbox.
 * Deployed with Lambda's retries and an on-failure destination (billing-consumer.ts, and
 * docs/consumer-deploying.md#retries-and-what-happens-after-them); `npm start` runs it locally against the local bus's deliveries.
 */

import {
  type ConnectionPool,
  DEFAULT_ROLES,
  type InboxContext,
  inbox,
  type Sql,
} from '@outbox-relay-aws/consumer';
import type { EventBridgeEvent } from 'aws-lambda';
import type * as z from 'zod/mini';
import { OrderPlaced } from './events.ts';
import { BILLING_CONSUMER } from './names.ts';

/**
 * The consumer's own table, created by its own migration in a real service, and granted to the
 * database role the function logs in as (when that role exists: `npm start` runs without roles).
 * @param role the consumer's role; default `outbox_consumer` (DEFAULT_ROLES.consumer)
 */
export async function createBillingSchema(sql: Sql, role: string = DEFAULT_ROLES.consumer): Promise<void> {
  await sql`create table if not exists billing_invoice (order_id text primary key, total numeric not null, created_at timestamptz not null default now())`;
  const [exists] = await sql`select 1 from pg_roles where rolname = ${role}`;
  if (exists) await sql`grant select, insert on billing_invoice to ${sql(role)}`;
}

/**
 * Builds the billing handler on a connection pool. Its rule delivers OrderPlaced only, one type of
 * the order's events, so it declares it (`types`): each order's OrderPlaced events are kept in
 * order by their typeSequence, and it never waits for the order's other types. An OrderPlaced
 * still missing after the gap wait parks the one behind it (counted as InboxParked, alarmed on in
 * billing-consumer.ts) rather than invoicing out of order. `metrics: false` turns the inbox's EMF
 * lines off (the local demo, which prints lines for a reader).
 */
export function createBillingHandler(sql: Sql | ConnectionPool, options: { metrics?: false } = {}) {
  return inbox(
    {
      sql,
      ...options,
      consumer: BILLING_CONSUMER,
      types: [OrderPlaced.type],
      order: 'wait-for-gap',
      onGapTimeout: 'park',
      schema: OrderPlaced.schema,
    },
    async (
      _event: EventBridgeEvent<string, unknown>,
      { inbox: { tx, data } }: InboxContext<z.output<typeof OrderPlaced.schema>>,
    ) => {
      await tx`insert into billing_invoice (order_id, total) values (${data.orderId}, ${data.total})`;
      return { invoiced: data.orderId };
    },
  );
}
