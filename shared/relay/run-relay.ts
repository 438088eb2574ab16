/**
 * The relay's composition root: one function that wires the settings, the database pool, the
 * EventBridge client and the loop. The relay Lambda, the `outbox relay` command, `npm start`, the
 * bench and a team's own host (ECS, a long-running process) all build their relay with it.
 */
import type { EventBridgeClient, EventBridgeClientConfig } from '@aws-sdk/client-eventbridge';
import {
  ConnectionPool,
  currentSql,
  EnvVar,
  keepsPublishedHistory,
  loadRelaySettings,
  OUTBOX_SEARCH_PATH,
  OutboxConfigError,
  openPool,
  poolSize,
  type RelaySettings,
  relayPoolSize,
  type Sql,
  withDeadline,
} from '../platform/index.ts';
import {
  createEventBridgeClient,
  createEventsV2Client,
  type EventsV2ClientConfig,
  eventBridgePublisher,
  eventsV2Publisher,
  type Publisher,
} from './buses/index.ts';
import type { RelayCounts } from './counts.ts';
import { type RelayRunResult, type RunRelayOptions, relayOnce, runRelay, UnreturnedLeases } from './loop.ts';
import { relayAnswerTimeout } from './pass.ts';
import { STATEMENT_DEADLINE_MS } from './pass-deadlines.ts';
import type { RelayFailure } from './pass-options.ts';
import { mayDeleteOutboxRows } from './sql/index.ts';

/**
 * The relay's sessions plan every statement at each call (`plan_cache_mode`): the claim's best plan
 * depends on how many rows are pending, which changes faster than ANALYZE runs, and a plan kept
 * from a small table read the whole backlog for every row (test/relay/claim-plan.test.ts,
 * docs/investigations/soak.md#stalls-in-the-soak-and-their-fixes). Sent by the relay's own pool, and
 * set on the relay role (`ensureRoles`) for a pool of the user's own.
 */
export const RELAY_PLAN_CACHE_MODE = 'force_custom_plan';

/** Options of {@link createRelay}; everything has a default read from the environment. */
export interface CreateRelayOptions {
  /** Where the settings and the database are read from (docs/configuration.md#environment-variables). Default `process.env`. */
  env?: NodeJS.ProcessEnv;
  /** The settings; default `loadRelaySettings(env)` (`EVENT_BUS_NAME` required, the rest defaulted). */
  settings?: RelaySettings;
  /**
   * The database. Default: a pool of its own from `openPool` (`DATABASE_URL` or libpq's `PG*`
   * variables in `env`), closed by {@link Relay.close}, of `OUTBOX_DB_POOL_SIZE` connections or,
   * unset, one per PutEvents call in flight plus one (`relayPoolSize`). A pool given here is the
   * caller's to close; give a {@link ConnectionPool} so that broken connections are replaced,
   * and open it with `planCacheMode: RELAY_PLAN_CACHE_MODE` (or log in as the relay role) when it
   * prepares statements.
   */
  sql?: Sql | ConnectionPool;
  /** Connection string for the pool of its own (instead of `DATABASE_URL`). */
  url?: string;
  /** `application_name` of its pool's sessions. Default `outbox-relay`. */
  applicationName?: string;
  /** The EventBridge client; default `createEventBridgeClient(clientConfig)` (the endpoint from `AWS_ENDPOINT_URL_EVENTBRIDGE`). */
  client?: EventBridgeClient;
  /** Configuration of the default client (region, credentials, endpoint). */
  clientConfig?: EventBridgeClientConfig;
  /**
   * Where events are put. Default: with `settings.eventBusArn` (`OUTBOX_EVENT_BUS_ARN`) the Custom
   * Event Bus through `createEventsV2Client(eventsV2ClientConfig)` (endpoint from
   * `AWS_ENDPOINT_URL_EVENTBRIDGEV2`), else the classic bus through `client`.
   */
  publisher?: Publisher;
  /** Configuration of the default Custom Event Bus client (region, credentials, endpoint). */
  eventsV2ClientConfig?: EventsV2ClientConfig;
}

/** What a relay run is told: everything of `runRelay`'s options but what {@link createRelay} wired. */
export type RelayRunOptions = Omit<
  RunRelayOptions,
  'sql' | 'client' | 'publisher' | 'settings' | 'unreturned' | 'answerTimeout' | 'publishSlots'
>;

/** A wired relay. Runs share what a relay learns: the bus's answer time and leases still to hand back. */
export interface Relay {
  readonly settings: RelaySettings;
  /** The database (a {@link ConnectionPool} unless one was given). */
  readonly sql: Sql | ConnectionPool;
  /** The classic bus's client; undefined when the relay publishes to a Custom Event Bus or was given a publisher. */
  readonly client: EventBridgeClient | undefined;
  /** Where events are put: the classic bus or the Custom Event Bus (buses/publisher.ts). */
  readonly publisher: Publisher;
  /**
   * Checks once that the client can sign PutEvents requests (region and credentials resolve), and,
   * with no published history (`OUTBOX_PUBLISHED_RETENTION_DAYS=0`), that the database user may
   * delete outbox rows: without it every mark would fail after the events went out, and each
   * lease's expiry would send them again.
   * @throws {OutboxConfigError} naming AWS_REGION or the credentials, or OUTBOX_PUBLISHED_RETENTION_DAYS
   * @throws the database's or the client's error when it cannot be asked (asked again at the next call; only a passed client check is kept)
   */
  check(): Promise<void>;
  /**
   * Relays until stopped (see `runRelay`: `signal`, `once`, `untilEmpty`, `remainingMs`,
   * `idleReturnMs`), after {@link check}. Leases a failed run could not hand back are handed back
   * by the next run.
   * @returns the totals and the stop reason
   * @throws what `runRelay` throws
   */
  run(options?: RelayRunOptions): Promise<RelayRunResult>;
  /**
   * One claim-publish-mark pass with a lease of its own; on failure its rows are handed back
   * (attempt returned) if the database answers.
   * @throws a database error of the pass
   */
  once(options?: {
    leaseSeconds?: number;
    onFailure?: (failure: RelayFailure) => void;
  }): Promise<RelayCounts>;
  /** Ends the pool it opened (not one it was given), within `timeoutSeconds` (default 5). */
  close(timeoutSeconds?: number): Promise<void>;
}

/**
 * Builds a relay from the environment and what is given.
 * @example
 * const relay = createRelay({ applicationName: 'orders-relay' });
 * try { await relay.run({ signal }); } finally { await relay.close(); }
 * @throws {OutboxConfigError} naming the first relay or `OUTBOX_DB_*` variable that is missing or malformed
 */
export function createRelay(options: CreateRelayOptions = {}): Relay {
  const env = options.env ?? process.env;
  const settings = options.settings ?? loadRelaySettings(env);
  const owned = options.sql === undefined;
  const sql =
    options.sql ??
    openPool({
      url: options.url,
      env,
      applicationName: options.applicationName ?? 'outbox-relay',
      planCacheMode: RELAY_PLAN_CACHE_MODE,
      searchPath: OUTBOX_SEARCH_PATH,
      idleInTransactionTimeoutMs: settings.leaseSeconds * 1000,
      max: poolSize(relayPoolSize(settings.publishConcurrency), env),
    });
  let client: EventBridgeClient | undefined;
  let publisher = options.publisher;
  if (!publisher && settings.eventBusArn) {
    publisher = eventsV2Publisher(createEventsV2Client(options.eventsV2ClientConfig), settings);
  } else if (!publisher) {
    client = options.client ?? createEventBridgeClient(options.clientConfig);
    publisher = eventBridgePublisher(client, settings);
  }
  const chosen = publisher;
  const unreturned = new UnreturnedLeases();
  // Kept across runs (a Lambda's warm invocations): a slow bus is learned once, not every minute.
  const answerTimeout = relayAnswerTimeout(settings);
  let checked: Promise<void> | undefined;
  // Without published history, asked before every run (one round trip per invocation), not once:
  // a warm relay whose DELETE was revoked meanwhile (a manual `outbox migrate --roles` without
  // OUTBOX_PUBLISHED_RETENTION_DAYS=0) would otherwise send a batch each invocation and fail its
  // mark with 42501, sending it again the next time (issue 48).
  const check = async () => {
    // Kept once it passed; a failure is asked again next time (a credentials provider may time
    // out once: cached, it failed a warm relay's every run until the process was recycled).
    checked ??= chosen.check().catch((error: unknown) => {
      checked = undefined;
      throw error;
    });
    await checked;
    if (keepsPublishedHistory(settings)) return;
    const { user, mayDelete } = await withDeadline(
      mayDeleteOutboxRows(currentSql(sql)),
      'DELETE privilege check',
      STATEMENT_DEADLINE_MS,
    );
    if (!mayDelete) throw noDeletePrivilege(user);
  };
  return {
    settings,
    sql,
    client,
    publisher: chosen,
    check,
    async run(runOptions = {}) {
      await check();
      return runRelay({ ...runOptions, sql, publisher: chosen, settings, unreturned, answerTimeout });
    },
    async once(onceOptions = {}) {
      await check();
      return relayOnce(
        { sql, publisher: chosen, settings, answerTimeout, onFailure: onceOptions.onFailure },
        onceOptions.leaseSeconds,
      );
    },
    async close(timeoutSeconds = 5) {
      if (!owned) return;
      if (sql instanceof ConnectionPool) await sql.end(timeoutSeconds);
      else await sql.end({ timeout: timeoutSeconds });
    },
  };
}

/** What a relay with no published history says when its user may not delete outbox rows. */
function noDeletePrivilege(user: string): OutboxConfigError {
  return new OutboxConfigError(
    EnvVar.publishedRetentionDays,
    `is 0 (no published history: the relay deletes each row it publishes), but the database user ` +
      `"${user}" may not delete outbox rows, so nothing was claimed. Run \`outbox migrate --roles\` with ` +
      `${EnvVar.publishedRetentionDays}=0 (the OutboxRelay construct does when ` +
      `monitorSettings.publishedRetentionDays is 0), or grant delete on outbox to "${user}"; or keep ` +
      `the history with a retention above 0 (docs/configuration.md#no-published-history)`,
  );
}
