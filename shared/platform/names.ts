/**
 * Names that the CDK construct and the handlers must agree on: metric namespace and names, the
 * metric dimension, service names, database role names and environment variable names. Both sides
 * import them from here, so an alarm can never watch a metric that no function emits under that
 * name (the rehearsal checks the synthesised template against what the functions emitted).
 *
 * This module has no dependencies: the construct imports it without pulling in any runtime code.
 */

/** Default CloudWatch namespace of every custom metric (`OUTBOX_METRIC_NAMESPACE`). */
export const DEFAULT_METRIC_NAMESPACE = 'Outbox';

/** The services (Powertools `serviceName`, the `service` metric dimension, `application_name`). */
export const ServiceName = {
  relay: 'outbox-relay',
  monitor: 'outbox-monitor',
  migrate: 'outbox-migrate',
  cli: 'outbox-cli',
} as const;
/** One of {@link ServiceName}'s values. */
export type ServiceName = (typeof ServiceName)[keyof typeof ServiceName];

/**
 * When a relay invocation stops: it claims nothing once its remaining time cannot hold the
 * shortest useful lease (`minLeaseSeconds`) plus the time kept for its last marks and its summary
 * (`marginMs`): it polls until 8 s before its timeout (shared/relay/loop.ts). The construct sizes
 * the relay's timeout from it, so that each invocation is still polling when the next one starts.
 */
export const RELAY_INVOCATION_END = { minLeaseSeconds: 5, marginMs: 3_000 } as const;

/**
 * The relay role's `idle_in_transaction_session_timeout`, ms: the default lease (OUTBOX_LEASE_SECONDS).
 * The claim's transaction commits only once the relay has its answer; should the relay freeze in
 * between (a Lambda frozen mid-call), the server ends the session and the claim rolls back, no later
 * than a committed lease would have expired. A role default, since a SET (or set_config) pins RDS
 * Proxy sessions; a direct pool sends the configured lease as a startup parameter instead.
 */
export const RELAY_IDLE_IN_TRANSACTION_TIMEOUT_MS = 8_000;

/**
 * The inbox roles' `idle_in_transaction_session_timeout`, ms: Lambda's longest timeout. An
 * invocation's transaction stays open while its handler runs, and ends before the invocation does
 * (shared/consumer/invocation.ts), so no legitimate one idles longer; a session that holds one
 * open past it (a frozen container, or a role holding its locks on purpose) is ended by the server.
 */
export const CONSUMER_IDLE_IN_TRANSACTION_TIMEOUT_MS = 900_000;

/** ms before its timeout at which a relay invocation stops polling (see {@link RELAY_INVOCATION_END}). */
export const RELAY_STOPS_POLLING_BEFORE_TIMEOUT_MS =
  RELAY_INVOCATION_END.minLeaseSeconds * 1000 + RELAY_INVOCATION_END.marginMs;

/**
 * Database connections of one relay invocation's pool: one per PutEvents call in flight, for
 * claims and marks overlapping them, plus one (functions/relay/handler.ts). The construct counts
 * the connections at the peak with it.
 */
export function relayPoolSize(publishConcurrency: number): number {
  return publishConcurrency + 1;
}

/** Database connections of the monitor's pool (functions/monitor/handler.ts). */
export const MONITOR_POOL_SIZE = 2;

/** The one dimension on every custom metric; its value is the emitting {@link ServiceName}. */
export const METRIC_DIMENSION = 'service';

/**
 * Metric names, each with the service that emits it (its `service` dimension). Units are set where
 * the metric is added (shared/relay/operations/metrics.ts).
 */
export const MetricName = {
  // monitor
  OldestPendingAge: 'OldestPendingAgeSeconds',
  Pending: 'PendingCount',
  InFlight: 'InFlightCount',
  DeadLettered: 'DeadLetteredCount',
  PrunedRows: 'PrunedRows',
  PruneDuration: 'PruneDuration',
  InboxParked: 'InboxParkedCount',
  InboxFailed: 'InboxFailedCount',
  ExtraRelays: 'ExtraRelaysStarted',
  // relay
  Published: 'Published',
  Retried: 'Retried',
  DeadLetteredByRelay: 'DeadLettered',
  LeaseLost: 'LeaseLost',
  Throttled: 'Throttled',
  BackPressure: 'BackPressure',
  LeaseRenewals: 'LeaseRenewals',
  PutEventsLatency: 'PutEventsLatency',
} as const;
/** One of {@link MetricName}'s values. */
export type MetricName = (typeof MetricName)[keyof typeof MetricName];

/** Which service emits each metric. */
export const METRIC_SERVICE: Readonly<Record<MetricName, ServiceName>> = {
  OldestPendingAgeSeconds: ServiceName.monitor,
  PendingCount: ServiceName.monitor,
  InFlightCount: ServiceName.monitor,
  DeadLetteredCount: ServiceName.monitor,
  PrunedRows: ServiceName.monitor,
  PruneDuration: ServiceName.monitor,
  InboxParkedCount: ServiceName.monitor,
  InboxFailedCount: ServiceName.monitor,
  ExtraRelaysStarted: ServiceName.monitor,
  Published: ServiceName.relay,
  Retried: ServiceName.relay,
  DeadLettered: ServiceName.relay,
  LeaseLost: ServiceName.relay,
  Throttled: ServiceName.relay,
  BackPressure: ServiceName.relay,
  LeaseRenewals: ServiceName.relay,
  PutEventsLatency: ServiceName.relay,
};

/**
 * Metrics the inbox emits from the consumer's own function (CloudWatch Embedded Metric Format
 * lines on stdout, in {@link DEFAULT_METRIC_NAMESPACE} unless the consumer names another), each
 * with the one dimension {@link INBOX_METRIC_DIMENSION} = the consumer's name. Counts, one per event,
 * but for {@link InboxMetricName.ConsumerLag} and {@link InboxMetricName.HeartbeatAge} (seconds).
 */
export const InboxMetricName = {
  /** wait-for-gap, `onGapTimeout: 'park'`: set aside for an operator after its wait. */
  Parked: 'InboxParked',
  /** ignore-stale: acknowledged without running the handler, superseded by a later event. */
  Stale: 'InboxStale',
  /** wait-for-gap: applied after a later event of its chain (it arrived late). */
  Late: 'InboxLate',
  /** Applied with earlier events of its chain still missing (after the gap wait, or ignore-stale). */
  AfterGap: 'InboxAfterGap',
  /**
   * wait-for-gap: an invocation failed with `InboxGapError` on purpose, so that Lambda retries the
   * event once the missing one may have come: a designed retry, not a failure of the handler. The
   * `OutboxConsumer`'s errors alarm subtracts it from the function's `Errors`.
   */
  GapRetry: 'InboxGapRetry',
  /**
   * A delivery a Custom Event Bus subscriber marked as a replay (`SystemMetadata."aws:DeliveryType"`
   * = `REPLAY`, a subscriber with `StartingPosition: POINT_IN_TIME`), whatever the inbox did with it
   * (applied, or acknowledged as a duplicate: the EMF line says which, with the event's id).
   */
  BusReplay: 'InboxBusReplay',
  /**
   * Seconds from the event's enqueue in the outbox (`metadata.occurredAt`, its transaction's time)
   * to the commit of the inbox transaction that applied it: the whole way, relay, bus, rule and
   * consumer, one value per applied event (the `OutboxConsumer` alarms on its p99).
   */
  ConsumerLag: 'ConsumerLag',
  /** A heartbeat event of the monitor reached this consumer (acknowledged, the handler not called). */
  HeartbeatReceived: 'HeartbeatReceived',
  /** Seconds from the heartbeat's enqueue to its arrival at this consumer. */
  HeartbeatAge: 'HeartbeatAgeSeconds',
} as const;
/** One of {@link InboxMetricName}'s values. */
export type InboxMetricName = (typeof InboxMetricName)[keyof typeof InboxMetricName];

/**
 * The heartbeat event the monitor enqueues through the outbox (migration 030,
 * `outbox_enqueue_heartbeat`): this Source and DetailType, aggregate `outbox.heartbeat` /
 * `heartbeat`, an empty payload. Every `OutboxConsumer`'s rule matches it too, and the inbox
 * acknowledges it without calling the handler (docs/observe.md#the-heartbeat).
 */
export const HEARTBEAT_EVENT = { source: 'outbox.heartbeat', detailType: 'OutboxHeartbeat' } as const;

/** The dimension of the inbox's metrics: its value is the consumer's name. */
export const INBOX_METRIC_DIMENSION = 'consumer';

/** Database roles a deployment creates (see shared/relay/operations/roles.ts for their grants). */
export interface OutboxRoles {
  /** Claims and marks outbox rows (select, update on `outbox`). */
  relay: string;
  /** Prunes and counts (outbox and inbox tables). */
  monitor: string;
  /** Enqueues events (inserts into `outbox`, bumps `outbox_aggregate`). */
  producer: string;
  /** Runs inbox consumers (the `inbox_*` tables), plus whatever the application grants it. */
  consumer: string;
}

/** Default role names. */
export const DEFAULT_ROLES: Readonly<OutboxRoles> = {
  relay: 'outbox_relay',
  monitor: 'outbox_monitor',
  producer: 'outbox_producer',
  consumer: 'outbox_consumer',
};

/**
 * The CA bundle of Lambda's Node.js 20+ runtimes, Amazon RDS CAs included. Node loads it only when
 * NODE_EXTRA_CA_CERTS points at it (AWS Lambda Node.js runtime docs), so every function that
 * connects to Postgres gets that variable.
 */
export const LAMBDA_CA_BUNDLE = '/var/runtime/ca-cert.pem';

/**
 * Environment variables the functions read and the construct sets: the only place their names are
 * spelled. Each setting's schema, default and unit are in shared/platform/config.ts, keyed by these.
 */
export const EnvVar = {
  databaseUrl: 'DATABASE_URL',
  pgHost: 'PGHOST',
  pgPort: 'PGPORT',
  pgDatabase: 'PGDATABASE',
  pgUser: 'PGUSER',
  pgPassword: 'PGPASSWORD',
  iamAuth: 'OUTBOX_DB_IAM_AUTH',
  /** `transaction` behind a pooler (RDS Proxy), `none` for a direct connection. */
  dbPooler: 'OUTBOX_DB_POOLER',
  dbPoolSize: 'OUTBOX_DB_POOL_SIZE',
  dbConnectTimeoutSeconds: 'OUTBOX_DB_CONNECT_TIMEOUT_SECONDS',
  dbStatementTimeoutMs: 'OUTBOX_DB_STATEMENT_TIMEOUT_MS',
  eventBusName: 'EVENT_BUS_NAME',
  /** A Custom Event Bus (EventsV2) ARN: set, the relay publishes there instead of EVENT_BUS_NAME's bus. */
  eventBusArn: 'OUTBOX_EVENT_BUS_ARN',
  metricNamespace: 'OUTBOX_METRIC_NAMESPACE',
  // the relay
  batchSize: 'OUTBOX_BATCH_SIZE',
  leaseSeconds: 'OUTBOX_LEASE_SECONDS',
  maxAttempts: 'OUTBOX_MAX_ATTEMPTS',
  backoffBaseMs: 'OUTBOX_BACKOFF_BASE_MS',
  backoffMaxMs: 'OUTBOX_BACKOFF_MAX_MS',
  publishConcurrency: 'OUTBOX_PUBLISH_CONCURRENCY',
  pipelineDepth: 'OUTBOX_PIPELINE_DEPTH',
  maxRequestBytes: 'OUTBOX_MAX_REQUEST_BYTES',
  perAggregateLimit: 'OUTBOX_PER_AGGREGATE_LIMIT',
  ordering: 'OUTBOX_ORDERING',
  deadLetterPolicy: 'OUTBOX_DEAD_LETTER_POLICY',
  pollIntervalMs: 'OUTBOX_POLL_INTERVAL_MS',
  /** Economy mode: a relay invocation returns after this many seconds without a claim (0: never). */
  idleReturnSeconds: 'OUTBOX_IDLE_RETURN_SECONDS',
  // the monitor and `outbox prune`
  publishedRetentionDays: 'OUTBOX_PUBLISHED_RETENTION_DAYS',
  deadLetterRetentionDays: 'OUTBOX_DEAD_LETTER_RETENTION_DAYS',
  inboxRetentionDays: 'OUTBOX_INBOX_RETENTION_DAYS',
  idempotencyRetentionDays: 'OUTBOX_IDEMPOTENCY_RETENTION_DAYS',
  pruneBatchSize: 'OUTBOX_PRUNE_BATCH_SIZE',
  pruneTimeBudgetMs: 'OUTBOX_PRUNE_TIME_BUDGET_MS',
  /** `on`: the monitor enqueues a heartbeat event every OUTBOX_HEARTBEAT_INTERVAL_SECONDS (docs/observe.md#the-heartbeat). */
  heartbeat: 'OUTBOX_HEARTBEAT',
  heartbeatIntervalSeconds: 'OUTBOX_HEARTBEAT_INTERVAL_SECONDS',
  /** `outbox enqueue`: Source for lines without one. */
  defaultSource: 'OUTBOX_DEFAULT_SOURCE',
  powertoolsServiceName: 'POWERTOOLS_SERVICE_NAME',
  /**
   * Node's extra CA certificates file. Lambda's Node 20+ runtimes load the Amazon RDS CA bundle
   * (`/var/runtime/ca-cert.pem`) only when this points at it; the construct sets it on every function
   * that connects to Postgres.
   */
  nodeExtraCaCerts: 'NODE_EXTRA_CA_CERTS',
  migrationsDir: 'OUTBOX_MIGRATIONS_DIR',
  adminSecretArn: 'DB_SECRET_ARN',
  adminHost: 'DB_HOST',
  adminDatabase: 'DB_NAME',
  relayRole: 'OUTBOX_RELAY_ROLE',
  monitorRole: 'OUTBOX_MONITOR_ROLE',
  producerRole: 'OUTBOX_PRODUCER_ROLE',
  consumerRole: 'OUTBOX_CONSUMER_ROLE',
  /**
   * The migrate function: inbox consumers that get a database role of their own
   * (`<consumer role>_<name>`, touching only their inbox rows), comma-separated.
   */
  inboxConsumers: 'OUTBOX_INBOX_CONSUMERS',
  /**
   * A consumer's function: the inbox consumer it runs (its `consumer` option). Set on the function
   * so that `outbox inbox parked replay --function-name F --consumer C` can check, before invoking
   * F, that F is C's function (GetFunctionConfiguration); the inbox itself does not read it.
   */
  inboxConsumer: 'OUTBOX_INBOX_CONSUMER',
  /**
   * A consumer's function: the inbox's default `retryWindowSeconds`, set by the OutboxConsumer
   * construct from the function's retry attempts (180 for 2, 60 for 1, 0 for none).
   */
  inboxRetryWindowSeconds: 'OUTBOX_INBOX_RETRY_WINDOW_SECONDS',
  /**
   * A consumer's function: the inbox's default `maxEventAgeSeconds`, set by the OutboxConsumer
   * construct from the function's `MaximumEventAgeInSeconds`.
   */
  inboxMaxEventAgeSeconds: 'OUTBOX_INBOX_MAX_EVENT_AGE_SECONDS',
  /**
   * A consumer's function: the inbox's default `parkAfterAttempts` (failed handler calls before an
   * event is parked and its aggregate held), set by the OutboxConsumer construct on a Custom Event
   * Bus subscriber (3), where a failing call holds up every group of the subscriber.
   */
  inboxParkAfterAttempts: 'OUTBOX_INBOX_PARK_AFTER_ATTEMPTS',
  /** The monitor: the relay function it invokes to scale out (unset: no scale-out). */
  relayFunctionName: 'OUTBOX_RELAY_FUNCTION_NAME',
  /** The monitor: most relays at once, the scheduled one included. */
  maxRelays: 'OUTBOX_MAX_RELAYS',
  /** The monitor: pending events per relay it wants running. */
  backlogPerRelay: 'OUTBOX_BACKLOG_PER_RELAY',
  /** `outbox bus`: the local EventBridge endpoint's port (`--port` wins). */
  localBusPort: 'LOCAL_BUS_PORT',
  /** The monitor: how long an extra relay it starts polls at most, seconds. */
  scaleOutSeconds: 'OUTBOX_SCALE_OUT_SECONDS',
} as const;
/** One of {@link EnvVar}'s values: the name of an environment variable. */
export type EnvVar = (typeof EnvVar)[keyof typeof EnvVar];
