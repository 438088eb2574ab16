/**
 * Classic event bus against the Custom Event Bus (EventsV2), per relay (issue 35): the same backlog
 * relayed by one `outbox relay --until-empty` process to each, at 20 ms bus latency, the two
 * alternating run by run. Both are the local bus (one process, the same latency injected), reached
 * by the real clients: `@aws-sdk/client-eventbridge` (AWS JSON) and the relay's EventsV2 client
 * (Smithy RPC v2 CBOR). Requests per event is what the bus counted; events/s is the relay's own
 * run time. Two shapes: one event per aggregate (a request fills to its entry limit: 10 and 100),
 * and 10 events per aggregate (the relay sends one event per aggregate per round, so a request
 * holds at most one event of each claimed aggregate).
 */

import type { Bench } from '../support/bench.ts';
import { median } from '../support/processes.ts';

/** A Custom Event Bus ARN of the local bus's form. */
const BUS_ARN = 'arn:aws:events:us-east-1:123456789012:event-busv2/bench/0123456789abcdef';

interface KindFigures {
  kind: 'classic' | 'custom';
  perAggregate: number;
  events: number;
  requestsPerEvent: number;
  eventsPerSecond: number;
  maxEntriesPerRequest: number;
}

/** Runs the section. */
export async function runBusKind(bench: Bench): Promise<void> {
  const { params, results, bus, reset, seed, report, log, want, runRelayProcess } = bench;
  if (!want('bus-kind')) return;
  await bus.setFaults({ latencyMs: 20 });
  const env = {
    classic: {},
    custom: { EVENT_BUS_NAME: '', OUTBOX_EVENT_BUS_ARN: BUS_ARN, AWS_ENDPOINT_URL_EVENTBRIDGEV2: bus.url },
  };
  const rows = params.slowRows;
  const out: KindFigures[] = [];
  for (const perAggregate of [1, 10]) {
    const runs = {
      classic: [] as { requests: number; eps: number; max: number }[],
      custom: [] as { requests: number; eps: number; max: number }[],
    };
    for (let i = 0; i < params.repeats; i++) {
      for (const kind of ['classic', 'custom'] as const) {
        await reset();
        await seed(rows, '', perAggregate);
        log(
          `bus-kind: ${kind} bus, ${rows} rows (${perAggregate} per aggregate) at 20 ms, run ${i + 1} of ${params.repeats}`,
        );
        const r = await runRelayProcess(env[kind]);
        const stats = await bus.stats();
        if (r.published !== rows || stats.accepted < rows) {
          throw new Error(
            `${kind}: relay published ${r.published} and the bus accepted ${stats.accepted} of ${rows}`,
          );
        }
        runs[kind].push({
          requests: stats.requests,
          eps: r.published / r.runSeconds,
          max: stats.maxEntriesPerRequest,
        });
      }
    }
    for (const kind of ['classic', 'custom'] as const) {
      out.push({
        kind,
        perAggregate,
        events: rows,
        requestsPerEvent: Number((median(runs[kind].map((r) => r.requests)) / rows).toFixed(3)),
        eventsPerSecond: Math.round(median(runs[kind].map((r) => r.eps))),
        maxEntriesPerRequest: Math.max(...runs[kind].map((r) => r.max)),
      });
    }
  }
  await bus.setFaults({});
  results.busKind = out;
  report(
    `### Classic bus against Custom Event Bus (EventsV2), one relay process, 20 ms bus latency\n\n${rows} events per run, medians of ${params.repeats} runs each, the two buses alternating. Requests per event as the bus counted them (PutEvents calls / events).\n\n| bus | events per aggregate | requests per event | largest request (entries) | events/s |\n|---|---|---|---|---|\n${out
      .map(
        (f) =>
          `| ${f.kind === 'classic' ? 'classic (PutEvents, 10 entries)' : 'Custom Event Bus (100 entries)'} | ${f.perAggregate} | ${f.requestsPerEvent} | ${f.maxEntriesPerRequest} | ${f.eventsPerSecond} |`,
      )
      .join('\n')}`,
  );
}
