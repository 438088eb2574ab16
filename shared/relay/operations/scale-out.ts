/**
 * Relays that scale with the backlog. The schedule keeps one relay polling at all times; when the
 * backlog grows, the monitor (which measures it every minute) invokes the relay function again,
 * asynchronously, once per extra relay it wants. An extra relay polls like the scheduled one, for
 * at most the seconds it is given (so that the extras of one minute have ended before the next
 * minute's are started), and returns as soon as nothing is pending: when the backlog shrinks,
 * fewer relays run the next minute, and none idles.
 *
 * What counts is claimable work (docs/relay.md#relays-scale-with-the-backlog): rows held back
 * behind a dead letter, in backoff or leased are pending but no extra relay could claim them, and
 * while the bus throttles, another relay only adds throttled calls.
 *
 * Claims are safe across relays (`FOR UPDATE SKIP LOCKED`, leases), so extra relays only add
 * throughput. What bounds them is the database: each relay opens up to its pool's connections,
 * so the construct checks at synth time that `maxRelays` fits its connection budget.
 */
import { InvokeCommand, type LambdaClient } from '@aws-sdk/client-lambda';
import {
  countFromDatabase,
  type MonitorSettings,
  OutboxValidationError,
  type Queryable,
} from '../../platform/index.ts';
import { countClaimable } from './sql/index.ts';

/** How the monitor scales the relays out. */
export type ScaleOutSettings = NonNullable<MonitorSettings['scaleOut']>;

/** The payload the monitor invokes an extra relay with. */
export interface RelayScaleOutEvent {
  scaleOut: {
    /** Poll at most this long (and return as soon as nothing is pending), seconds. */
    forSeconds: number;
  };
}

/** What a relay invocation's payload asks for: nothing (a scheduled invocation), or scale-out. */
export interface RelayInvocationRequest {
  /** Set for an extra relay: return once nothing is pending, and after this many ms at most. */
  scaleOutForMs?: number;
}

/** Shortest scale-out worth starting an extra relay for, seconds. */
export const MIN_SCALE_OUT_SECONDS = 10;
/** Longest one, seconds: a relay's timeout is at most 15 minutes. */
const MAX_SCALE_OUT_SECONDS = 900;

/**
 * Reads a relay invocation's payload. EventBridge Scheduler sends the schedule's input (none: `{}`);
 * the monitor sends a {@link RelayScaleOutEvent}. Other members are ignored.
 * @throws {OutboxValidationError} naming `scaleOut` or `scaleOut.forSeconds` when they are malformed
 */
export function readRelayEvent(event: unknown): RelayInvocationRequest {
  if (event === null || event === undefined || typeof event !== 'object' || !('scaleOut' in event)) return {};
  const scaleOut = (event as { scaleOut: unknown }).scaleOut;
  if (scaleOut === null || typeof scaleOut !== 'object' || Array.isArray(scaleOut)) {
    throw new OutboxValidationError(
      'scaleOut',
      `must be an object { forSeconds } (got ${JSON.stringify(scaleOut)})`,
    );
  }
  const forSeconds = (scaleOut as { forSeconds?: unknown }).forSeconds;
  if (
    typeof forSeconds !== 'number' ||
    !Number.isInteger(forSeconds) ||
    forSeconds < 1 ||
    forSeconds > MAX_SCALE_OUT_SECONDS
  ) {
    throw new OutboxValidationError(
      'scaleOut.forSeconds',
      `must be a whole number of seconds from 1 to ${MAX_SCALE_OUT_SECONDS} (got ${JSON.stringify(forSeconds)})`,
    );
  }
  return { scaleOutForMs: forSeconds * 1000 };
}

/**
 * Relays wanted for the claimable work: `ceil(claimable / backlogPerRelay)`, from 1 to `maxRelays`,
 * and under per-aggregate ordering no more than the aggregates whose head is claimable (`heads`):
 * one relay at a time holds an aggregate's head, so 100,000 rows of one aggregate are work for one
 * relay, and extras would claim nothing.
 */
export function relaysWanted(
  work: Pick<ClaimableWork, 'claimable' | 'heads'>,
  s: Pick<ScaleOutSettings, 'maxRelays' | 'backlogPerRelay'>,
): number {
  const byRows = Math.ceil(work.claimable / s.backlogPerRelay);
  const byHeads = work.heads ?? Number.POSITIVE_INFINITY;
  return Math.min(s.maxRelays, Math.max(1, Math.min(byRows, byHeads)));
}

/** The work extra relays could share, as the monitor measures it. */
export interface ClaimableWork {
  /**
   * Rows a claim could take now (pending, out of backoff, not leased, not held back behind a dead
   * letter under `block`), counted up to `(maxRelays − 1) × backlogPerRelay + 1`: enough to want
   * every relay allowed, no further.
   */
  claimable: number;
  /**
   * Under `OUTBOX_ORDERING=aggregate`: the aggregates of those rows whose head a claim could take
   * now (the lowest row holding the aggregate back is claimable), counted up to `maxRelays`; absent
   * under `none`, where every row is claimable on its own.
   */
  heads?: number;
  /** The bus is throttling the relays: a pending row waits out a backoff after a throttling error. */
  throttled: boolean;
}

/**
 * Measures {@link ClaimableWork} in one statement. Its cost is bounded by what `maxRelays` needs:
 * at most `(maxRelays − 1) × backlogPerRelay + 1` rows of the pending index and their heap rows
 * (under per-aggregate ordering at least HEADS_SCAN_ROWS, 10,000), plus 1,000 for the throttling
 * test, whatever the backlog; under per-aggregate ordering, one head probe per distinct aggregate
 * of those rows until `maxRelays` claimable heads are found.
 */
export async function measureClaimable(
  sql: Queryable,
  s: Pick<ScaleOutSettings, 'maxRelays' | 'backlogPerRelay' | 'ordering' | 'deadLetterPolicy'>,
): Promise<ClaimableWork> {
  const row = await countClaimable(sql, {
    limit: (s.maxRelays - 1) * s.backlogPerRelay + 1,
    block: s.ordering === 'aggregate' && s.deadLetterPolicy === 'block',
    ...(s.ordering === 'aggregate' ? { maxHeads: s.maxRelays } : {}),
  });
  return {
    claimable: countFromDatabase(row?.claimable, 'claimable'),
    ...(row?.heads === null || row?.heads === undefined
      ? {}
      : { heads: countFromDatabase(row.heads, 'claimable heads') }),
    throttled: row?.throttled ?? false,
  };
}

/**
 * Extra relays are invoked this far apart, ms. Each one opens its pool's connections as it starts
 * (an IAM token and a TLS handshake each through RDS Proxy); spacing them keeps the logins well
 * under what IAM authentication is made for (AWS suggests below 200 new connections a second):
 * 5 connections every 100 ms is 50 a second, a quarter of it. The 99 extras of `maxRelays` 100
 * go out in 9.8 s, within one monitor run. It was 500 ms for up to 21 extras (issue 48): 1 s of a
 * 4-relay drain went by before the last extra was even invoked, while one relay worked alone.
 */
export const SCALE_OUT_STAGGER_MS = 100;

/** What {@link startExtraRelays} did. */
export interface ScaleOutResult extends ClaimableWork {
  /** Relays wanted, the scheduled one included (1 while the bus throttles). */
  wanted: number;
  /** Extra relays invoked (accepted by Lambda). */
  started: number;
  /** What the first extra relay was given, seconds (later ones get what is left until the same end). */
  forSeconds: number;
  /** Invocations Lambda refused, that did not answer in time, or not made (`ErrorName: message`). */
  errors: string[];
}

/**
 * Invokes the relay function `wanted − 1` times (InvocationType `Event`: Lambda queues each and
 * answers 202 at once), spaced by {@link SCALE_OUT_STAGGER_MS}, each with a {@link RelayScaleOutEvent}
 * whose `forSeconds` ends at `endsAt`. Nothing is started while the bus throttles, when one relay
 * is enough, or once less than {@link MIN_SCALE_OUT_SECONDS} is left. Each invocation is sent on its
 * time without waiting for the previous answer, bounded by the client's timeouts and by `signal`.
 * Never throws: a refused invocation is reported (and the backlog is looked at again next minute).
 * @param endsAt when every extra relay must have stopped polling, `performance.now()` ms
 */
export async function startExtraRelays(
  client: LambdaClient,
  settings: ScaleOutSettings,
  work: ClaimableWork,
  endsAt: number,
  signal?: AbortSignal,
): Promise<ScaleOutResult> {
  const wanted = work.throttled ? 1 : relaysWanted(work, settings);
  const secondsLeft = () => Math.floor((endsAt - performance.now()) / 1000);
  const result: ScaleOutResult = { ...work, wanted, started: 0, forSeconds: secondsLeft(), errors: [] };
  if (wanted <= 1 || result.forSeconds < MIN_SCALE_OUT_SECONDS) return result;
  const first = performance.now();
  const calls: Promise<void>[] = [];
  for (let i = 1; i < wanted; i++) {
    const wait = first + (i - 1) * SCALE_OUT_STAGGER_MS - performance.now();
    if (wait > 0) await new Promise((r) => setTimeout(r, wait));
    const forSeconds = secondsLeft();
    if (signal?.aborted || forSeconds < MIN_SCALE_OUT_SECONDS) {
      result.errors.push(
        signal?.aborted
          ? `AbortError: ${wanted - i} extra relays not started (the monitor ran out of time)`
          : `TooLate: ${wanted - i} extra relays not started (less than ${MIN_SCALE_OUT_SECONDS} s of their minute left)`,
      );
      break;
    }
    const payload: RelayScaleOutEvent = { scaleOut: { forSeconds } };
    calls.push(
      client
        .send(
          new InvokeCommand({
            FunctionName: settings.relayFunctionName,
            InvocationType: 'Event',
            Payload: new TextEncoder().encode(JSON.stringify(payload)),
          }),
          { abortSignal: signal },
        )
        .then(
          () => {
            result.started++;
          },
          (error: unknown) => {
            const e = error as { name?: string; message?: string };
            result.errors.push(`${e.name ?? 'Error'}: ${e.message ?? String(error)}`);
          },
        ),
    );
  }
  await Promise.all(calls);
  return result;
}
