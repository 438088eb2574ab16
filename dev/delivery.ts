/**
 * The event EventBridge hands a rule's Lambda target, carrying the outbox envelope in `detail`: a
 * fixture the tests and the bench share (bench/ may import dev/, never test/).
 */
import { randomUUID } from 'node:crypto';
import type { EventBridgeEvent } from 'aws-lambda';
import type { Envelope, EnvelopeMetadata } from '../shared/platform/index.ts';

/** What differs between deliveries; everything else is a fixed, valid EventBridge event. */
export interface DeliveryOptions {
  detailType?: string;
  source?: string;
  /** Defaults: a new eventId, aggregate `order/o-1`, sequence 1, occurredAt now. */
  metadata?: Partial<EnvelopeMetadata>;
  data?: Record<string, unknown>;
  region?: string;
  account?: string;
  /** ISO time; default now. */
  time?: string;
}

/** A delivery of one outbox event. EventBridge's own `id` is new on every call, as on every redelivery. */
export function delivery(o: DeliveryOptions = {}): EventBridgeEvent<string, Envelope> {
  return {
    version: '0',
    id: randomUUID(),
    'detail-type': o.detailType ?? 'OrderPlaced',
    source: o.source ?? 'shop.orders',
    account: o.account ?? '123456789012',
    time: o.time ?? new Date().toISOString(),
    region: o.region ?? 'eu-west-1',
    resources: [],
    detail: {
      metadata: {
        eventId: randomUUID(),
        aggregateType: 'order',
        aggregateId: 'o-1',
        sequence: 1,
        occurredAt: new Date().toISOString(),
        ...o.metadata,
      },
      data: o.data ?? {},
    },
  };
}
