/**
 * The example billing consumer doing its real work logged in as the consumer's own database role,
 * as it does in AWS: the inbox tables are granted by `ensureRoles`, its own table by
 * `createBillingSchema`. A missing grant fails here with 42501.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { delivery } from '../../dev/delivery.ts';
import { createBillingHandler, createBillingSchema } from '../../examples/billing/consumer.ts';
import { OrderPlaced } from '../../examples/billing/events.ts';
import type { OutboxRoles, Sql } from '../../shared/platform/index.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';
import { createTestRoles, type TestRoles } from '../support/roles.ts';

let db: TestDatabase;
let testRoles: TestRoles;
let roles: OutboxRoles;
let consumer: Sql;
beforeAll(async () => {
  db = await createTestDatabase();
  testRoles = await createTestRoles(db);
  roles = testRoles.roles;
  await createBillingSchema(db.sql, roles.consumer);
  consumer = testRoles.connectAs(roles.consumer);
});
afterAll(async () => {
  await testRoles?.drop();
  await db?.drop();
});

const orderPlaced = (orderId: string, sequence: number, eventId = randomUUID()) =>
  delivery({
    detailType: OrderPlaced.type,
    source: OrderPlaced.source,
    metadata: { eventId, aggregateId: orderId, sequence },
    data: { orderId, total: 42 },
  });

describe('example billing consumer', () => {
  it('invoices each order once under its own database role, acknowledging a redelivery', async () => {
    const handler = createBillingHandler(consumer);
    const eventId = randomUUID();
    const event = orderPlaced('o-1', 1, eventId);
    expect(await handler(event, lambdaContext(10_000) as never)).toEqual({ invoiced: 'o-1' });
    expect(await handler({ ...event, id: randomUUID() }, lambdaContext(10_000) as never)).toEqual({
      inbox: 'duplicate',
      eventId,
    });
    const [row] = await db.sql<{ invoices: number; records: number }[]>`
      select (select count(*)::int from billing_invoice) as invoices,
             (select count(*)::int from inbox_message where consumer = 'billing') as records`;
    expect(row).toEqual({ invoices: 1, records: 1 });
    const [me] = await consumer<{ who: string }[]>`select current_user as who`;
    expect(me?.who).toBe(roles.consumer);
  });
});
