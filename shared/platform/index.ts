/**
 * Platform: what every role of the outbox stands on — database connections, configuration, the
 * error hierarchy, the event envelope, schema migrations and the shared names.
 */
export * from './config.ts';
export * from './connection-errors.ts';
export * from './connection-url.ts';
export * from './db.ts';
export * from './envelope.ts';
export * from './errors.ts';
export * from './exact-json.ts';
export * from './migrate.ts';
export * from './names.ts';
export { oneStatementPerConnection } from './pooler.ts';
export * from './trace-context.ts';
