/**
 * Commander argument parsers. A value they refuse becomes commander's usage error ("option
 * '--limit <n>' argument '0' is invalid. …", exit 2), with the reason and the accepted form.
 */
import { InvalidArgumentError } from 'commander';
import { parseEventRef } from '../shared/operations/index.ts';

/** A whole number of at least 1 (counts, batch sizes). */
export function positiveInteger(value: string): number {
  if (!/^\d+$/.test(value.trim()) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
    throw new InvalidArgumentError('It must be a whole number, 1 or more.');
  }
  return Number(value);
}

const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

/**
 * A point in time: an ISO date/time, or a duration back from now (`90m`, `36h`, `7d`).
 * @param now the reference for durations (tests fix it)
 */
export function parseSince(value: string, now = new Date()): Date {
  const m = /^(\d+(?:\.\d+)?)([smhd])$/.exec(value.trim());
  if (m) return new Date(now.getTime() - Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS]);
  const date = /^\d{4}-\d{2}-\d{2}/.test(value.trim()) ? new Date(value) : new Date(Number.NaN);
  if (Number.isNaN(date.getTime())) {
    throw new InvalidArgumentError(
      'It must be an ISO date/time (2026-11-30 or 2026-11-30T09:00:00Z) or a duration back from now (90m, 36h, 7d).',
    );
  }
  return date;
}

/** A dead letter's row id (digits) or eventId (uuid), as the operator typed it. */
export function eventRef(value: string): string {
  try {
    parseEventRef(value);
  } catch {
    throw new InvalidArgumentError('It must be a row id (digits) or an event id (uuid).');
  }
  return value;
}

/** {@link eventRef} for a variadic argument: collects the ids. */
export function eventRefs(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), eventRef(value)];
}
