/**
 * The producer's trace context as the outbox carries it: one X-Ray trace header in the
 * `trace_header` column (EventBridge's `TraceHeader`), and the same context as a W3C `traceparent`
 * in the envelope's metadata, for the consumer's span. The mapping is the one of OpenTelemetry's
 * AWS X-Ray propagator (`@opentelemetry/propagator-aws-xray`): the 32 hex digits of the trace id
 * are X-Ray's `1-<8 hex>-<24 hex>`, the span id is `Parent`, the sampled flag is `Sampled`.
 * `tracestate` has no X-Ray counterpart and is not carried (docs/observe.md#the-trace).
 *
 * A leaf: pure functions, no import, so the producer, the relay and the consumer share it.
 */

/** A W3C trace context's ids: 32 and 16 lowercase hex digits, neither all zeros. */
export interface TraceIds {
  traceId: string;
  spanId: string;
  sampled: boolean;
}

const TRACE_ID = /^[0-9a-f]{32}$/;
const SPAN_ID = /^[0-9a-f]{16}$/;
const TRACEPARENT = /^00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$/;
const XRAY_ROOT = /(?:^|;)\s*Root=1-([0-9a-f]{8})-([0-9a-f]{24})\s*(?:;|$)/;
const XRAY_PARENT = /(?:^|;)\s*Parent=([0-9a-f]{16})\s*(?:;|$)/;
const XRAY_SAMPLED = /(?:^|;)\s*Sampled=([01])\s*(?:;|$)/;

/** True when the ids are a valid W3C context (hex of the right length, not all zeros). */
export function validIds(ids: { traceId: string; spanId: string }): boolean {
  return (
    TRACE_ID.test(ids.traceId) &&
    SPAN_ID.test(ids.spanId) &&
    !/^0+$/.test(ids.traceId) &&
    !/^0+$/.test(ids.spanId)
  );
}

/** `Root=1-…;Parent=…;Sampled=…` of the ids; undefined when they are not a valid context. */
export function xrayTraceHeader(ids: TraceIds): string | undefined {
  if (!validIds(ids)) return undefined;
  const { traceId, spanId, sampled } = ids;
  return `Root=1-${traceId.slice(0, 8)}-${traceId.slice(8)};Parent=${spanId};Sampled=${sampled ? 1 : 0}`;
}

/**
 * The ids of an X-Ray trace header, or undefined when it has no `Root` and `Parent` of the
 * mapped form (a header passed by hand may lack `Parent`: it then names no span to link to).
 */
export function idsOfTraceHeader(header: string | null | undefined): TraceIds | undefined {
  if (!header) return undefined;
  const root = XRAY_ROOT.exec(header);
  const parent = XRAY_PARENT.exec(header);
  if (!root || !parent) return undefined;
  const ids = {
    traceId: `${root[1]}${root[2]}`,
    spanId: parent[1] as string,
    sampled: XRAY_SAMPLED.exec(header)?.[1] === '1',
  };
  return validIds(ids) ? ids : undefined;
}

/** `00-<trace id>-<span id>-<flags>` of the ids; undefined when they are not a valid context. */
export function traceparentOf(ids: TraceIds | undefined): string | undefined {
  if (!ids || !validIds(ids)) return undefined;
  return `00-${ids.traceId}-${ids.spanId}-${ids.sampled ? '01' : '00'}`;
}

/** The ids of a version-00 `traceparent`, or undefined when it is not one. */
export function idsOfTraceparent(traceparent: unknown): TraceIds | undefined {
  if (typeof traceparent !== 'string') return undefined;
  const m = TRACEPARENT.exec(traceparent);
  if (!m) return undefined;
  const ids = {
    traceId: m[1] as string,
    spanId: m[2] as string,
    sampled: (Number.parseInt(m[3] as string, 16) & 1) === 1,
  };
  return validIds(ids) ? ids : undefined;
}
