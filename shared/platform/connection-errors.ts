/**
 * Which database errors mean "the connection could not be made or went away" (retry on a fresh
 * connection) rather than "the statement is wrong". Matched on codes, never on message text.
 */

/**
 * porsager `postgres` and Node socket error codes that mean "the connection could not be made or
 * went away", not "the query is wrong".
 */
export const CONNECTION_ERROR_CODES: ReadonlySet<string> = new Set([
  'CONNECTION_CLOSED',
  'CONNECTION_ENDED',
  'CONNECTION_DESTROYED',
  'CONNECT_TIMEOUT',
  'ECONNREFUSED',
  'ECONNRESET',
  'EPIPE',
  'ETIMEDOUT',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'ENOTFOUND',
  'EAI_AGAIN',
]);

/**
 * True when the connection a statement ran on can no longer be trusted: it went away (a socket
 * error, a server shutting down or restarting: SQLSTATE class 08, 57P01–57P03) or it stopped
 * answering ({@link OutboxDeadlineError}). The relay then replaces its {@link ConnectionPool}.
 */
export function isConnectionFailure(error: unknown): boolean {
  const code = (error as { code?: unknown } | null)?.code;
  if (typeof code !== 'string') return false;
  return (
    CONNECTION_ERROR_CODES.has(code) ||
    code === 'OUTBOX_DEADLINE' ||
    /^08/.test(code) ||
    /^57P0[123]$/.test(code)
  );
}

/**
 * True for failures worth retrying with a fresh connection: a {@link isConnectionFailure}, a
 * cancelled statement (57014, statement timeout), a serialisation failure or deadlock (class 40),
 * or the server running short of resources (class 53). Matched on codes, never on message text.
 */
export function isTransientDatabaseError(error: unknown): boolean {
  if (isConnectionFailure(error)) return true;
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === 'string' && (/^(40|53)/.test(code) || code === '57014');
}
