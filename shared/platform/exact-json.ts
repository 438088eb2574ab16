/**
 * Values kept exact between the database and the bus, the API and the CLI's output.
 *
 * Postgres keeps a jsonb number as `numeric` (any number of digits: 1234567890123456789,
 * 0.12345678901234567890123, 1e-400) and int8 columns (ids, sequences, counts) as 64-bit
 * integers; a JavaScript number is a double, exact only for integers up to 2^53 − 1 and for about
 * 17 significant digits. So nothing on the way from the database may parse those values into
 * numbers: payloads travel as jsonb's own text, int8s as decimal strings, and where a JSON
 * document needs a number literal, the decimal text is written as one (`JSON.rawJSON`, Node 21+).
 */
import { OutboxError } from './errors.ts';

/** `JSON.rawJSON` and the reviver's `context.source` (ES2026; Node 21+), typed here. */
const json = JSON as unknown as {
  rawJSON(text: string): unknown;
  parse(
    text: string,
    reviver: (key: string, value: unknown, context?: { source?: string }) => unknown,
  ): unknown;
};

/** A JSON literal (a number's exact text) that `JSON.stringify` writes out as it is. */
export function rawJson(text: string): unknown {
  return json.rawJSON(text);
}

/**
 * jsonb's text form made compact: jsonb prints `{"a": 1, "b": [1, 2]}`, a space after every `:`
 * and `,` outside string literals; this removes those and copies string literals verbatim (one
 * linear scan). Numbers stay as Postgres spells them (`1.50`, `0.000…1`), exactly the stored value.
 * The result has exactly the bytes `outbox_json_bytes` (migration 007) counts when enqueue checks an
 * entry's size, so what the relay sends is what was validated.
 * @param text jsonb's output (`payload::text`); any JSON text without whitespace in it but spaces
 */
export function compactJsonb(text: string): string {
  let out = '';
  let from = 0;
  let i = 0;
  const n = text.length;
  while (i < n) {
    const c = text.charCodeAt(i);
    if (c === 0x22) {
      // A string literal: jump to its closing quote, the first one not escaped by an odd run of
      // backslashes (indexOf runs natively, so long strings cost little).
      i++;
      for (;;) {
        const quote = text.indexOf('"', i);
        if (quote < 0) return from === 0 ? text : out + text.slice(from);
        let b = quote - 1;
        while (b >= i && text.charCodeAt(b) === 0x5c) b--;
        i = quote + 1;
        if ((quote - 1 - b) % 2 === 0) break;
      }
    } else if (c === 0x20) {
      out += text.slice(from, i);
      i++;
      from = i;
    } else {
      i++;
    }
  }
  return from === 0 ? text : out + text.slice(from);
}

/**
 * Parses JSON text with every number kept as its exact text: `JSON.stringify` of the result writes
 * each number back as it was written (`1234567890123456789` stays itself, not `1234567890123456800`).
 * Numbers in the result are raw JSON values, not JavaScript numbers: use it to re-serialise, e.g.
 * to indent a payload for a terminal.
 */
export function parseExactJson(text: string): unknown {
  return json.parse(text, (_key, value, context) =>
    typeof value === 'number' && context?.source !== undefined ? json.rawJSON(context.source) : value,
  );
}

/** The decimal text of a JSON number literal as `JSON.parse` saw it, for exact checks. */
export class JsonNumberText {
  readonly text: string;
  constructor(text: string) {
    this.text = text;
  }
}

/** Parses JSON text with every number as a {@link JsonNumberText} (its exact source text). */
export function parseJsonNumbersAsText(text: string): unknown {
  return json.parse(text, (_key, value, context) =>
    typeof value === 'number' ? new JsonNumberText(context?.source ?? String(value)) : value,
  );
}

const TWO_POW_63 = 2n ** 63n;

/**
 * Whether a JSON number literal lies outside the int64 range, exactly: at least 2^63 or below
 * −2^63, whatever its spelling (`9223372036854775808`, `9.3e18`, `9223372036854775807.5` is inside).
 * The same test as `outbox_enqueue`'s, made on the decimal text rather than on a double (which
 * rounds 9223372036854775807 up to 2^63).
 */
export function outsideInt64(literal: string): boolean {
  const m = /^(-?)(\d+)(?:\.(\d+))?(?:[eE]([+-]?\d+))?$/.exec(literal);
  if (!m) return false;
  const [, sign, whole = '', fraction = '', exponent = '0'] = m;
  const digits = whole + fraction;
  const firstNonZero = digits.search(/[1-9]/);
  if (firstNonZero < 0) return false; // zero
  // The integer part of |value| is the first `point` digits of `digits`.
  const point = whole.length + Number(exponent);
  if (point - firstNonZero > 19) return true; // 10^19 and more: beyond 2^63
  if (point <= firstNonZero) return false; // |value| < 1
  const integer = BigInt(digits.slice(0, point).padEnd(point, '0'));
  if (sign === '') return integer >= TWO_POW_63;
  return integer > TWO_POW_63 || (integer === TWO_POW_63 && /[1-9]/.test(digits.slice(point)));
}

/**
 * An int8 the database returned (as decimal text, as every Node driver returns it) as a number,
 * for counts: refuses, rather than rounds, a value beyond 2^53 − 1. No Postgres table can hold that
 * many rows (a table is at most 32 TB), so a count never is.
 * @param what names the value in the error
 * @throws {OutboxError} for a value a double cannot hold exactly
 */
export function countFromDatabase(value: string | number | bigint | null | undefined, what: string): number {
  if (value === null || value === undefined) return 0;
  const n = Number(value);
  if (!Number.isSafeInteger(n)) {
    throw new OutboxError(
      `${what}: ${String(value)} is beyond the integers a JavaScript number holds exactly`,
    );
  }
  return n;
}

/** Orders two int8 decimal strings (as the database returns them: no leading zeros) by value. */
export function compareInt8(a: string, b: string): number {
  const negativeA = a.startsWith('-');
  if (negativeA !== b.startsWith('-')) return negativeA ? -1 : 1;
  const magnitude = a.length - b.length || (a < b ? -1 : a > b ? 1 : 0);
  return negativeA ? -magnitude : magnitude;
}
