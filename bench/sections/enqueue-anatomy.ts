/**
 * Bench section `enqueue-anatomy` (issue 20): what each part of an enqueue costs the database, built
 * up one part at a time from the plain design's INSERT to `outbox_enqueue` as shipped and the
 * TypeScript `enqueue()`. It shows which guarantee each microsecond and byte buys, and so what the
 * floor is: the db-cost section's bounds compare the whole enqueue with the plain INSERT.
 *
 * Steps (each measured as db-cost measures an enqueue: `events` events over `aggregates`
 * aggregates, each in its own transaction, from `clients` clients, on empty tables after a
 * CHECKPOINT; every aggregate's counter exists beforehand, having counted one event of each type,
 * so every step measures the steady state of an aggregate seen before):
 * 1. the plain design's INSERT (bench/plain-outbox.ts);
 * 2. this project's row, inserted by the client (its columns and its three indexes; `sequence`
 *    from a Postgres sequence, as nothing orders it);
 * 3. the same INSERT inside a PL/pgSQL function (the call, nothing else);
 * 4. + the aggregate's counter: `UPDATE … RETURNING` its last sequence (the row lock that orders an
 *    aggregate's events by commit, and `sequence`);
 * 5. + the per-type counts (`typeSequence`), as outbox_enqueue keeps them (jsonb; the counter's
 *    number last in the row, as migration 014 keeps it);
 * 6. `outbox_enqueue` as shipped: + the validation of every field, SECURITY DEFINER with a
 *    pinned search_path;
 * 7. `enqueue()` from the TypeScript producer (what it sends for one event).
 * Steps 2–5 are functions of this section's own (schema `anatomy`), not the product's; they write
 * the product's tables. The steps alternate across repeats; figures are medians.
 */

import type { Sql } from '../../shared/platform/index.ts';
import { enqueue } from '../../shared/producer/index.ts';
import { plainEnqueue, setUpPlainOutbox } from '../plain-outbox.ts';
import type { PgCost } from '../support/pg-cost.ts';
import { median } from '../support/processes.ts';
import { benchEvent, fromClients, openDbCostRig, type SectionContext } from './db-cost.ts';

/** Knobs of the section. */
export interface AnatomyOptions {
  events: number;
  aggregates: number;
  clients: number;
  repeats: number;
}

/** One step's per-event figures (medians over the repeats). */
export interface AnatomyStep {
  step: string;
  cpuUs: number;
  walBytes: number;
}

type Event = ReturnType<typeof benchEvent>;

/**
 * The section's helper functions (schema `anatomy`, dropped and created anew): the INSERT of
 * outbox_enqueue, with less around it. SQL to run once on a database with the outbox's tables;
 * STEPS 2–5 call them. Also run by the enqueue-instructions section, which counts the same steps.
 */
export const HELPERS = `
  drop schema if exists anatomy cascade;
  create schema anatomy;
  create sequence anatomy.sequence;
  create function anatomy.row_only(event_type text, source text, aggregate_type text, aggregate_id text, payload jsonb,
    out event_id uuid, out sequence bigint)
  language plpgsql volatile as $fn$
  begin
    event_id := gen_random_uuid();
    sequence := nextval('anatomy.sequence');
    insert into outbox.outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, source, payload)
    values (row_only.event_id, row_only.aggregate_type, row_only.aggregate_id, row_only.sequence,
            row_only.event_type, row_only.source, row_only.payload);
  end $fn$;
  create function anatomy.with_counter(event_type text, source text, aggregate_type text, aggregate_id text, payload jsonb,
    out event_id uuid, out sequence bigint)
  language plpgsql volatile as $fn$
  begin
    update outbox.outbox_aggregate as a set sequence_offset = a.sequence_offset + 1
    where a.aggregate_type = with_counter.aggregate_type and a.aggregate_id = with_counter.aggregate_id
    returning a.last_sequence + a.sequence_offset into with_counter.sequence;
    event_id := gen_random_uuid();
    insert into outbox.outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, source, payload)
    values (with_counter.event_id, with_counter.aggregate_type, with_counter.aggregate_id, with_counter.sequence,
            with_counter.event_type, with_counter.source, with_counter.payload);
  end $fn$;
  create function anatomy.with_type_counts(event_type text, source text, aggregate_type text, aggregate_id text, payload jsonb,
    out event_id uuid, out sequence bigint)
  language plpgsql volatile as $fn$
  declare type_sequence bigint;
  begin
    update outbox.outbox_aggregate as a
    set type_counts = coalesce(a.type_counts, '{}'::jsonb) || jsonb_build_object(
          with_type_counts.event_type, coalesce((a.type_counts ->> with_type_counts.event_type)::bigint, 0) + 1),
        sequence_offset = a.sequence_offset + 1
    where a.aggregate_type = with_type_counts.aggregate_type and a.aggregate_id = with_type_counts.aggregate_id
    returning a.last_sequence + a.sequence_offset, (a.type_counts ->> with_type_counts.event_type)::bigint
    into with_type_counts.sequence, type_sequence;
    event_id := gen_random_uuid();
    insert into outbox.outbox (event_id, aggregate_type, aggregate_id, sequence, type_sequence, event_type, source, payload)
    values (with_type_counts.event_id, with_type_counts.aggregate_type, with_type_counts.aggregate_id,
            with_type_counts.sequence, type_sequence, with_type_counts.event_type, with_type_counts.source,
            with_type_counts.payload);
  end $fn$;`;

/** One step of the anatomy: a label and how one event is written in the caller's transaction. */
export interface AnatomyStepDef {
  step: string;
  write: (tx: Sql, e: Event) => Promise<unknown>;
}

/**
 * The steps, in order (1 … 7 of the section's docstring); steps 2–5 need HELPERS and step 1 the
 * plain design's table (setUpPlainOutbox). Also counted by the enqueue-instructions section.
 */
export const STEPS: AnatomyStepDef[] = [
  {
    step: 'plain design: one INSERT of its row',
    write: (tx, e) => plainEnqueue(tx, { ...e, dedupKey: crypto.randomUUID() }),
  },
  {
    step: "this project's row, INSERT from the client",
    write: (tx, e) => tx`
      insert into outbox.outbox (event_id, aggregate_type, aggregate_id, sequence, event_type, source, payload)
      values (gen_random_uuid(), 'order', ${e.aggregateId}, nextval('anatomy.sequence'), ${e.type},
              ${e.source}, ${tx.json(e.payload)})`,
  },
  {
    step: 'the same INSERT in a PL/pgSQL function',
    write: (tx, e) =>
      tx`select * from anatomy.row_only(${e.type}, ${e.source}, 'order', ${e.aggregateId}, ${tx.json(e.payload)})`,
  },
  {
    step: "+ the aggregate's counter (lock, `sequence`)",
    write: (tx, e) =>
      tx`select * from anatomy.with_counter(${e.type}, ${e.source}, 'order', ${e.aggregateId}, ${tx.json(e.payload)})`,
  },
  {
    step: '+ the per-type counts (`typeSequence`)',
    write: (tx, e) =>
      tx`select * from anatomy.with_type_counts(${e.type}, ${e.source}, 'order', ${e.aggregateId}, ${tx.json(e.payload)})`,
  },
  {
    step: '`outbox_enqueue` as shipped (+ validation, SECURITY DEFINER)',
    write: (tx, e) => tx`
      select event_id, sequence, duplicate from outbox.outbox_enqueue(
        event_type => ${e.type}, source => ${e.source}, aggregate_type => 'order',
        aggregate_id => ${e.aggregateId}, payload => ${tx.json(e.payload)})`,
  },
  {
    step: '`enqueue()` from TypeScript',
    write: (tx, e) =>
      enqueue(tx, {
        type: e.type,
        source: e.source,
        aggregateType: 'order',
        aggregateId: e.aggregateId,
        payload: e.payload,
      }),
  },
];

/**
 * Empties the outbox and the plain design's table, and gives aggregates `0` … `aggregates − 1` of
 * type `order` a counter that has counted one event of each of the bench's types: the steady state
 * of an aggregate seen before, with no counter row created during a measurement.
 */
export async function emptyWithCountersSeen(sql: Sql, aggregates: number): Promise<void> {
  await sql`truncate outbox.outbox, outbox.outbox_aggregate, plain_outbox restart identity`;
  await sql`
    insert into outbox.outbox_aggregate (aggregate_type, aggregate_id, last_sequence, type_counts)
    select 'order', g::text, 3, '{"OrderPaid": 1, "OrderPlaced": 1, "OrderShipped": 1}'
    from generate_series(0, ${aggregates - 1}) as g`;
}

/**
 * Writes `o.events` events with step `s`, each in a transaction of its own, from `o.clients`
 * clients of `sql`, event `n` being `benchEvent(n, o.aggregates)`.
 */
export async function writeStep(
  sql: Sql,
  s: AnatomyStepDef,
  o: { events: number; aggregates: number; clients: number },
): Promise<void> {
  await fromClients(o.events, o.clients, async (n) => {
    const e = benchEvent(n, o.aggregates);
    await sql.begin((tx) => s.write(tx as unknown as Sql, e));
  });
}

/** Runs the section on a cluster of its own and reports its table. */
export async function enqueueAnatomy(ctx: SectionContext, o: AnatomyOptions): Promise<AnatomyStep[]> {
  const rig = await openDbCostRig(o.clients);
  const { sql, probe } = rig;
  try {
    await setUpPlainOutbox(sql);
    await sql.unsafe(HELPERS);
    const costs: PgCost[][] = STEPS.map(() => []);
    for (let r = 0; r < o.repeats; r++) {
      // Alternate the direction, so that no step always follows the same one.
      const order = STEPS.map((_, i) => i);
      if (r % 2 === 1) order.reverse();
      for (const i of order) {
        const s = STEPS[i] as AnatomyStepDef;
        await emptyWithCountersSeen(sql, o.aggregates);
        const { cost } = await probe.measure(() => writeStep(sql, s, o));
        costs[i]?.push(cost);
        ctx.log(
          `enqueue-anatomy #${r + 1} ${s.step}: ${Math.round(cost.cpuUs / o.events)} µs ${Math.round(cost.walBytes / o.events)} B`,
        );
      }
    }
    const steps = STEPS.map((s, i) => ({
      step: s.step,
      cpuUs: Math.round(median((costs[i] ?? []).map((c) => c.cpuUs)) / o.events),
      walBytes: Math.round(median((costs[i] ?? []).map((c) => c.walBytes)) / o.events),
    }));
    ctx.report(table(steps, o));
    return steps;
  } finally {
    await rig.close();
  }
}

function table(steps: AnatomyStep[], o: AnatomyOptions): string {
  const plain = steps[0] as AnatomyStep;
  const lines = steps.map((s, i) => {
    const prev = steps[i - 1];
    const delta = (a: number, b: number | undefined) =>
      b === undefined ? '' : `${a - b >= 0 ? '+' : ''}${a - b}`;
    return `| ${i + 1}. ${s.step} | ${s.cpuUs} | ${delta(s.cpuUs, prev?.cpuUs)} | ${(s.cpuUs / plain.cpuUs).toFixed(2)}× | ${s.walBytes} | ${delta(s.walBytes, prev?.walBytes)} | ${(s.walBytes / plain.walBytes).toFixed(2)}× |`;
  });
  return `### What an enqueue is made of, per event (${o.events.toLocaleString('en')} events, ${o.aggregates.toLocaleString('en')} aggregates seen before)

| step | DB CPU (µs) | added | ÷ plain | WAL (B) | added | ÷ plain |
|---|---|---|---|---|---|---|
${lines.join('\n')}

Each step is the one above it plus one part; steps 2–5 are the section's own functions (bench/sections/enqueue-anatomy.ts), writing the product's tables. Measured as the db-cost section measures an enqueue (${o.clients} clients, one transaction per event, after a CHECKPOINT), on a private cluster; medians of ${o.repeats} runs, the steps alternating. Every aggregate's counter exists beforehand, having counted one event of each type (db-cost's enqueue also creates them: a quarter of its events are an aggregate's first).`;
}
