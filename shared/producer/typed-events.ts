/**
 * Typed events: declare an event type once, with its payload schema (zod), and use it on both
 * sides — the producer's enqueue validates the payload against it, the consumer (inbox middleware,
 * `schema` option) gets a typed, validated `data`.
 *
 * ```ts
 * export const OrderPlaced = defineEvent({
 *   type: 'OrderPlaced', source: 'shop.orders',
 *   schema: z.object({ orderId: z.string(), total: z.number().nonnegative() }),
 * });
 * await sql.begin((tx) => OrderPlaced.enqueue(tx, { aggregateType: 'order', aggregateId: id, payload: { orderId: id, total: 12 } }));
 * ```
 */
import type { Queryable } from '../platform/db.ts';
import { OutboxValidationError } from '../platform/errors.ts';
import { enqueue } from './enqueue.ts';
import type { EnqueueOptions, EnqueueResult, OutboxEvent } from './types.ts';

/**
 * A payload schema: a zod 4 schema made with `zod` or with `zod/mini`; both have the `safeParse`
 * and `parse` methods used here, and zod's Standard Schema property (`~standard`) that carries the
 * input and output types. Declared by that shape rather than with zod's own types, so that the
 * package's types need no zod where no schema is used: the schema brings its zod with it.
 *
 * `zod/mini` is the one for a Lambda bundle: `import { z } from 'zod'` puts all of zod in the
 * bundle (about 460 KiB minified, whatever the schema uses), `zod/mini` only the functions called
 * (about 13 KiB for an object of strings and numbers).
 */
export interface PayloadSchema<Output = unknown, Input = unknown> {
  readonly '~standard': { readonly types?: { readonly input: Input; readonly output: Output } | undefined };
  safeParse(
    data: unknown,
  ):
    | { success: true; data: Output }
    | { success: false; error: { issues: readonly { path: readonly PropertyKey[]; message: string }[] } };
  parse(data: unknown): Output;
}

/** The payload type a schema accepts (zod's `z.input`). */
export type PayloadInput<S extends PayloadSchema> = NonNullable<S['~standard']['types']>['input'];
/** The payload type a schema returns (zod's `z.output`). */
export type PayloadOutput<S extends PayloadSchema> = NonNullable<S['~standard']['types']>['output'];

/** A declared event type. */
export interface EventDefinition<S extends PayloadSchema<Record<string, unknown>>> {
  readonly type: string;
  readonly source: string | undefined;
  readonly schema: S;
  /**
   * Validates the payload against the schema, then enqueues it in the caller's transaction.
   * @throws {OutboxValidationError} naming the payload field (`payload.total`) the schema refused
   */
  enqueue(
    tx: Queryable,
    event: Omit<OutboxEvent, 'type' | 'payload'> & { payload: PayloadInput<S> },
    options?: EnqueueOptions,
  ): Promise<EnqueueResult>;
  /** Validates received data (e.g. `detail.data`); throws the schema's error when it does not match. */
  parse(data: unknown): PayloadOutput<S>;
}

/** Declares an event type with its payload schema. */
export function defineEvent<S extends PayloadSchema<Record<string, unknown>>>(definition: {
  type: string;
  source?: string;
  schema: S;
}): EventDefinition<S> {
  return {
    type: definition.type,
    source: definition.source,
    schema: definition.schema,
    async enqueue(tx, event, options) {
      const parsed = definition.schema.safeParse(event.payload);
      if (!parsed.success) {
        const issue = parsed.error.issues[0];
        const path = (issue?.path ?? [])
          .map((p) => (typeof p === 'number' ? `[${p}]` : `.${String(p)}`))
          .join('');
        throw new OutboxValidationError(`payload${path}`, issue?.message ?? 'does not match the schema', {
          cause: parsed.error,
        });
      }
      return enqueue(
        tx,
        {
          ...event,
          type: definition.type,
          source: event.source ?? definition.source,
          payload: parsed.data as Record<string, unknown>,
        },
        options,
      );
    },
    parse: (data) => definition.schema.parse(data) as PayloadOutput<S>,
  };
}
