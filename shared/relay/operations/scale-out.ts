/**
 * Relays that scale with the backlog. The schedule keeps one relay polling at all times; when the
 * backlog grows, the monitor (which measures it every minute) invokes the relay function again,
 * asynchronously, once per extra relay it wants. An extra relay polls like the scheduled one, for
 * at most the seconds it is given (so that the extras of one minute have ended before the next
 * minute's are started), and returns as soon as nothing is pending: when the backlog shrinks,
 * fewer relays run the next minute, and none idles.
 *
 * Claims are safe across relays (`FOR UPDATE SKIP LOCKED`, leases), so extra relays only add
 * throughput. What bounds them is the database: each relay opens up to its pool's connections,
 * so the construct checks at synth time that `maxRelays` fits its connection budget.
 */
import { InvokeCommand, type LambdaClient } from '@aws-sdk/client-lambda';
import { OutboxValidationError } from '../../platform/index.ts';

/** How the monitor scales the relays out. */
export interface ScaleOutSettings {
  /** Name or ARN of the relay function. */
  relayFunctionName: string;
  /** Most relays at once, the scheduled one included (1: never scale out). */
  maxRelays: number;
  /** Pending events per relay: `ceil(pending / backlogPerRelay)` relays are wanted. */
  backlogPerRelay: number;
  /** Longest an extra relay polls, counted from the start of the monitor's invocation, seconds. */
  forSeconds: number;
}

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

/** Relays wanted for `pending` events: `ceil(pending / backlogPerRelay)`, from 1 to `maxRelays`. */
export function relaysWanted(
  pending: number,
  s: Pick<ScaleOutSettings, 'maxRelays' | 'backlogPerRelay'>,
): number {
  return Math.min(s.maxRelays, Math.max(1, Math.ceil(pending / s.backlogPerRelay)));
}

/**
 * Extra relays are invoked this far apart, ms. Each one opens its pool's connections as it starts
 * (an IAM token and a TLS handshake each through RDS Proxy); spreading them keeps a burst of
 * logins well under what IAM authentication is made for (AWS suggests it below 200 new
 * connections a second) and what RDS Proxy accepts at once ("too many competing requests"):
 * 5 connections every 500 ms is 10 a second.
 */
export const SCALE_OUT_STAGGER_MS = 500;

/** What {@link startExtraRelays} did. */
export interface ScaleOutResult {
  pending: number;
  wanted: number;
  /** Extra relays invoked (accepted by Lambda). */
  started: number;
  forSeconds: number;
  /** Invocations Lambda refused or that did not answer in time (`ErrorName: message`). */
  errors: string[];
}

/**
 * Invokes the relay function `wanted - 1` times (InvocationType `Event`: Lambda queues each and
 * answers 202 at once), {@link SCALE_OUT_STAGGER_MS} apart, each with a {@link RelayScaleOutEvent}.
 * Nothing is started when one relay is enough or `forSeconds` is under
 * {@link MIN_SCALE_OUT_SECONDS}. Each call is bounded by the client's timeouts and by `signal`.
 * Never throws: a refused invocation is reported (and the backlog is looked at again next minute).
 */
export async function startExtraRelays(
  client: LambdaClient,
  settings: ScaleOutSettings,
  pending: number,
  forSeconds: number,
  signal?: AbortSignal,
): Promise<ScaleOutResult> {
  const wanted = relaysWanted(pending, settings);
  const result: ScaleOutResult = { pending, wanted, started: 0, forSeconds, errors: [] };
  if (wanted <= 1 || forSeconds < MIN_SCALE_OUT_SECONDS) return result;
  const payload: RelayScaleOutEvent = { scaleOut: { forSeconds: Math.floor(forSeconds) } };
  const body = new TextEncoder().encode(JSON.stringify(payload));
  for (let i = 1; i < wanted; i++) {
    if (signal?.aborted) {
      result.errors.push(`AbortError: ${wanted - i} extra relays not started (the monitor ran out of time)`);
      break;
    }
    if (i > 1) await new Promise((r) => setTimeout(r, SCALE_OUT_STAGGER_MS));
    try {
      await client.send(
        new InvokeCommand({
          FunctionName: settings.relayFunctionName,
          InvocationType: 'Event',
          Payload: body,
        }),
        { abortSignal: signal },
      );
      result.started++;
    } catch (error) {
      const e = error as { name?: string; message?: string };
      result.errors.push(`${e.name ?? 'Error'}: ${e.message ?? String(error)}`);
    }
  }
  return result;
}
