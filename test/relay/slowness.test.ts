/**
 * Slowness fault injection (see test/chaos/slowness.ts): a bus and a database that stall for
 * bounded times. No pass may outlive its lease, no invocation its deadline, and no healthy event
 * may be dead-lettered or lost.
 */
import { describe, expect, it } from 'vitest';
import { runSlowBus, runSlowness } from '../chaos/slowness.ts';
import { useHarness } from '../support/harness.ts';

const h = useHarness({ max: 4 });

describe('slowness (bounded stalls)', () => {
  it('keeps every pass inside its lease and dead-letters nothing while the bus and the database stall', async () => {
    const report = await runSlowness({
      databaseUrl: h.db.url,
      sql: h.db.sql,
      bus: h.bus,
      backlog: 1_000,
      ratePerSecond: 60,
      aggregates: 150,
      drainTimeoutMs: 60_000,
    });
    console.log(JSON.stringify(report));
    expect(report.passesOutlivingLease).toBe(0);
    expect(report.invocationsOutlivingDeadline).toBe(0);
    expect(report.deadLettered).toBe(0);
    expect(report.published).toBe(report.events);
    expect(report.orderViolations).toBe(0);
    expect(report.leaseLost).toBe(0);
    // The faults did bite: passes failed on the stalled database, and the bus pushed back.
    expect(report.passesCutByDeadline).toBeGreaterThan(0);
    expect(report.backPressure).toBeGreaterThan(0);
    expect(report.invocations).toBeGreaterThan(2);
  }, 150_000);
});

describe('slowness (a slow bus that works)', () => {
  // Issue 19 (4 s) and issue 31 item 2 (6 s and 9 s): at the default 8 s lease a call once had at
  // most about 5 s, so a bus answering in 6 s or more never got a row marked (0 of 20 in 60 s).
  it.each([
    { busLatencyMs: 4_000, runForMs: 45_000 },
    { busLatencyMs: 6_000, runForMs: 60_000 },
    { busLatencyMs: 9_000, runForMs: 90_000 },
  ])(
    'publishes and marks every event on a bus that answers every request after $busLatencyMs ms, with at most 2 deliveries per event',
    async ({ busLatencyMs, runForMs }) => {
      const report = await runSlowBus({
        databaseUrl: h.db.url,
        sql: h.db.sql,
        bus: h.bus,
        events: 20,
        busLatencyMs,
        runForMs,
      });
      console.log(JSON.stringify({ busLatencyMs, ...report }));
      expect(report.published).toBe(20);
      expect(report.allMarkedAfterMs).toBeLessThan(runForMs);
      expect(report.deliveries).toBeLessThanOrEqual(40);
      expect(report.maxDeliveriesPerEvent).toBeLessThanOrEqual(2);
    },
    150_000,
  );
});

describe('slowness (a bus slower than 10 s, a lease that allows it)', () => {
  // Issue 48 item 1: the call and the answer timeout were capped at 10 s whatever the lease, and a
  // timeout was back-pressure: a bus answering in 12 s with a 30 s lease got 0 of 20 marked and
  // 70 deliveries in 66 s, still climbing (the Custom Event Bus: 0 marked, its dedup window only
  // postponing the duplicates). The call may now wait what the lease allows (30 s less its margins).
  it.each([
    { busKind: 'classic', busLatencyMs: 12_000, runForMs: 75_000 },
    { busKind: 'classic', busLatencyMs: 20_000, runForMs: 90_000 },
    { busKind: 'custom', busLatencyMs: 12_000, runForMs: 75_000 },
    { busKind: 'custom', busLatencyMs: 20_000, runForMs: 90_000 },
  ] as const)(
    'marks every event on a $busKind bus answering after $busLatencyMs ms with a 30 s lease, with at most 2 deliveries per event',
    async ({ busKind, busLatencyMs, runForMs }) => {
      const report = await runSlowBus({
        databaseUrl: h.db.url,
        sql: h.db.sql,
        bus: h.bus,
        events: 20,
        busLatencyMs,
        runForMs,
        leaseSeconds: 30,
        busKind,
      });
      console.log(JSON.stringify({ busKind, busLatencyMs, ...report }));
      expect(report.published).toBe(20);
      expect(report.deadLettered).toBe(0);
      expect(report.deliveries).toBeGreaterThanOrEqual(20);
      expect(report.deliveries).toBeLessThanOrEqual(40);
      expect(report.maxDeliveriesPerEvent).toBeLessThanOrEqual(2);
    },
    150_000,
  );
});
