/**
 * EventBridge event patterns, evaluated locally (EventBridge User Guide, "Creating event patterns"
 * and "Content filtering"), for the local delivery's rules and subscriber filters: a pattern is an
 * object whose leaves are arrays of values or content filters; an event matches when, for every
 * field the pattern names, the event's value (or, for an array, any of its elements) matches one
 * of the array's entries. Values compare exactly (strings case-sensitive, numbers as numbers,
 * `null`); the filters taken are `prefix`, `suffix` (each also `{ 'equals-ignore-case': … }`),
 * `equals-ignore-case`, `anything-but` (a value, a list, or `{ prefix }` / `{ suffix }`), `exists`,
 * `numeric` (`['>', 0, '<=', 5]`, `['=', 3]`) and `wildcard` (`*`). `$or` is taken too.
 *
 * A filter it does not know (`cidr`) is refused when the pattern is read ({@link checkEventPattern}),
 * naming it, so that a local run never delivers what AWS would not, or the reverse, in silence.
 */

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

const FILTERS = new Set([
  'prefix',
  'suffix',
  'equals-ignore-case',
  'anything-but',
  'exists',
  'numeric',
  'wildcard',
]);

/**
 * Checks that every filter of `pattern` is one {@link matchesEventPattern} evaluates.
 * @throws Error naming the field and the filter it does not take
 */
export function checkEventPattern(pattern: Json, path = ''): void {
  if (Array.isArray(pattern)) {
    for (const entry of pattern) {
      if (entry && typeof entry === 'object' && !Array.isArray(entry)) {
        for (const key of Object.keys(entry)) {
          if (!FILTERS.has(key)) {
            throw new Error(
              `${path || 'the pattern'}: the local delivery does not evaluate the "${key}" filter`,
            );
          }
        }
      }
    }
    return;
  }
  if (pattern && typeof pattern === 'object') {
    for (const [key, value] of Object.entries(pattern)) {
      if (key === '$or') for (const alternative of value as Json[]) checkEventPattern(alternative, path);
      else checkEventPattern(value, path ? `${path}.${key}` : key);
    }
  }
}

/** Whether `event` (the EventBridge event, or any JSON object) matches `pattern`. */
export function matchesEventPattern(pattern: Record<string, Json>, event: unknown): boolean {
  return Object.entries(pattern).every(([key, expected]) => {
    if (key === '$or') {
      return (expected as Record<string, Json>[]).some((alternative) =>
        matchesEventPattern(alternative, event),
      );
    }
    const present = event !== null && typeof event === 'object' && key in (event as object);
    const actual = present ? (event as Record<string, unknown>)[key] : undefined;
    if (Array.isArray(expected)) return matchesLeaf(expected, present, actual);
    if (expected && typeof expected === 'object') return present && matchesEventPattern(expected, actual);
    return false;
  });
}

/** A leaf: an array of values and filters, against the field's value (any element of an array). */
function matchesLeaf(entries: Json[], present: boolean, actual: unknown): boolean {
  const values = Array.isArray(actual) ? actual : [actual];
  return entries.some((entry) => {
    if (entry && typeof entry === 'object' && !Array.isArray(entry)) {
      if ('exists' in entry) return entry.exists === present;
      if (!present) return 'anything-but' in entry;
      return values.some((value) => matchesFilter(entry, value));
    }
    return present && values.some((value) => value === entry);
  });
}

function matchesFilter(filter: { [key: string]: Json }, value: unknown): boolean {
  const [name, argument] = Object.entries(filter)[0] ?? [];
  const text = typeof value === 'string' ? value : undefined;
  const ignoringCase = (a: Json) =>
    a && typeof a === 'object' && !Array.isArray(a) ? String(a['equals-ignore-case']) : undefined;
  switch (name) {
    case 'prefix':
    case 'suffix': {
      if (text === undefined) return false;
      const folded = ignoringCase(argument as Json);
      const [subject, affix] =
        folded === undefined ? [text, String(argument)] : [text.toLowerCase(), folded.toLowerCase()];
      return name === 'prefix' ? subject.startsWith(affix) : subject.endsWith(affix);
    }
    case 'equals-ignore-case':
      return text !== undefined && text.toLowerCase() === String(argument).toLowerCase();
    case 'wildcard': {
      if (text === undefined) return false;
      const escaped = String(argument)
        .split('*')
        .map((part) => part.replace(/[.+?^${}()|[\]\\]/g, '\\$&'));
      return new RegExp(`^${escaped.join('.*')}$`, 's').test(text);
    }
    case 'anything-but': {
      if (Array.isArray(argument)) return !argument.includes(value as Json);
      if (argument && typeof argument === 'object') return !matchesFilter(argument, value);
      return value !== argument;
    }
    case 'numeric': {
      if (typeof value !== 'number') return false;
      const terms = argument as Json[];
      for (let i = 0; i < terms.length; i += 2) {
        const bound = Number(terms[i + 1]);
        const ok = {
          '<': value < bound,
          '<=': value <= bound,
          '=': value === bound,
          '>': value > bound,
          '>=': value >= bound,
        }[String(terms[i]) as '<'];
        if (!ok) return false;
      }
      return true;
    }
    default:
      return false;
  }
}
