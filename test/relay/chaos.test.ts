import { describe, expect, it } from 'vitest';
import { countOrderViolations, formatReport, runChaos } from '../chaos/chaos.ts';

describe('chaos (short run)', () => {
  it('loses nothing, invents nothing and keeps per-aggregate order through kills, a Postgres restart and bus faults', async () => {
    const options = {
      events: 3_000,
      relays: 3,
      kills: 4,
      aggregates: 300,
      restartPostgres: true,
      rollbackRate: 0.1,
      poisonRate: 0.005,
      drainTimeoutMs: 120_000,
    };
    const report = await runChaos(options);
    console.log(formatReport(report, options));
    expect(report.kills).toBe(4);
    expect(report.postgresRestarts).toBe(1);
    expect(report.committed).toBeGreaterThan(2_000);
    expect(report.rolledBack).toBeGreaterThan(0);
    expect(report.lost).toBe(0);
    expect(report.phantoms).toBe(0);
    expect(report.rolledBackPublished).toBe(0);
    expect(report.orderViolations).toBe(0);
    expect(report.unexplainedDuplicates).toBe(0);
    expect(report.unexpectedDeadLetters).toBe(0);
    expect(report.deadLettered).toBe(report.poisonPlanted);
  }, 240_000);

  it('counts an event first accepted after a later one of its aggregate as a violation', () => {
    const m = (aggregateId: string, sequence: number) => ({
      eventId: `${aggregateId}-${sequence}`,
      aggregateType: 'a',
      aggregateId,
      sequence,
      occurredAt: '',
    });
    expect(countOrderViolations([m('x', 1), m('x', 2), m('x', 1), m('y', 1), m('x', 4)])).toBe(0);
    expect(countOrderViolations([m('x', 2), m('x', 1)])).toBe(1);
  });
});
