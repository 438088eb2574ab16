/**
 * Commander argument parsers. A value they refuse becomes commander's usage error ("option
 * '--limit <n>' argument '0' is invalid. …", exit 2), with the reason and the accepted form.
 */
import { InvalidArgumentError } from 'commander';

/** A whole number of at least 1 (counts, batch sizes). */
export function positiveInteger(value: string): number {
  if (!/^\d+$/.test(value.trim()) || Number(value) < 1 || !Number.isSafeInteger(Number(value))) {
    throw new InvalidArgumentError('It must be a whole number, 1 or more.');
  }
  return Number(value);
}

/** A whole number of at least 0 (a number of seconds that may be none). */
export function nonNegativeInteger(value: string): number {
  if (!/^\d+$/.test(value.trim()) || !Number.isSafeInteger(Number(value))) {
    throw new InvalidArgumentError('It must be a whole number, 0 or more.');
  }
  return Number(value);
}

/** A factor above 0 and at most 1 (a scale that shortens waits: 0.05). */
export function shorteningFactor(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n <= 0 || n > 1) {
    throw new InvalidArgumentError('It must be a number above 0 and at most 1, like 0.05.');
  }
  return n;
}

/** A TCP port to listen on: 0 (any free one) to 65535. */
export function portNumber(value: string): number {
  const n = nonNegativeInteger(value);
  if (n > 65_535) throw new InvalidArgumentError('It must be a port, 0 (any free one) to 65535.');
  return n;
}

/**
 * An SQS visibility timeout for reading a queue through: a whole number of seconds from 1 to 43,200
 * (12 hours, SQS's most). Not 0: the messages would be received again while they are read.
 */
export function visibilitySeconds(value: string): number {
  const n = positiveInteger(value);
  if (n > 43_200)
    throw new InvalidArgumentError('It must be at most 43200 (12 hours, the longest SQS allows).');
  return n;
}

const UNIT_SECONDS = { s: 1, m: 60, h: 3_600, d: 86_400 } as const;

/**
 * An ISO 8601 date, or date-time with a time zone: `2026-11-30`, `2026-11-30T09:00Z`,
 * `2026-11-30T09:00:00.5+01:00` (a space may stand for the `T`).
 */
const ISO_INSTANT =
  /^(\d{4}-\d{2}-\d{2})(?:[T ](\d{2}):(\d{2})(?::(\d{2})(\.\d{1,9})?)?(Z|[+-]\d{2}(?::?\d{2})?)?)?$/i;

const SINCE_FORMS =
  'an ISO date (2026-11-30, midnight UTC), an ISO date-time with its time zone (2026-11-30T09:00:00Z, ' +
  '2026-11-30T10:00:00+01:00) or a duration back from now on the database clock (90m, 36h, 7d)';

/**
 * A point in time for `--since`: a duration back from the database's `now()` (`90m`, `36h`, `7d`,
 * returned as seconds and counted back in the database, since `dead_lettered_at` is written with
 * the database's clock), or an instant: an ISO date (midnight UTC) or an ISO date-time with a time
 * zone. A date-time without one is refused, rather than read in this machine's time zone.
 */
export function parseSince(value: string): Date | { secondsAgo: number } {
  const text = value.trim();
  const duration = /^(\d+(?:\.\d+)?)([smhd])$/.exec(text);
  if (duration) {
    return { secondsAgo: Number(duration[1]) * UNIT_SECONDS[duration[2] as keyof typeof UNIT_SECONDS] };
  }
  const m = ISO_INSTANT.exec(text);
  if (!m) throw new InvalidArgumentError(`It must be ${SINCE_FORMS}.`);
  const [, date, hours, minutes, seconds, fraction, zone] = m;
  if (hours !== undefined && zone === undefined) {
    throw new InvalidArgumentError(
      'It has no time zone: add Z for UTC or an offset such as +01:00 (dead letters are timed by the ' +
        `database's clock; a time without a zone would be read in this machine's time zone). It must be ${SINCE_FORMS}.`,
    );
  }
  const offset =
    zone === undefined || zone.toUpperCase() === 'Z'
      ? 'Z'
      : `${zone.slice(0, 3)}:${zone.slice(3).replace(':', '') || '00'}`;
  const at = new Date(
    `${date}T${hours ?? '00'}:${minutes ?? '00'}:${seconds ?? '00'}${(fraction ?? '').slice(0, 4)}${offset}`,
  );
  // The Date must say the same calendar day back (2026-02-30 is not a date, not 2 March).
  if (Number.isNaN(at.getTime()) || !sameDay(date as string, at, offset)) {
    throw new InvalidArgumentError(`${text} is not a valid date. It must be ${SINCE_FORMS}.`);
  }
  return at;
}

/** Whether `at`, seen at `offset`, falls on the calendar day `date` (YYYY-MM-DD). */
function sameDay(date: string, at: Date, offset: string): boolean {
  const minutes =
    offset === 'Z'
      ? 0
      : (offset.startsWith('-') ? -1 : 1) * (Number(offset.slice(1, 3)) * 60 + Number(offset.slice(4)));
  return new Date(at.getTime() + minutes * 60_000).toISOString().slice(0, 10) === date;
}
