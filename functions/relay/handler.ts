/**
 * Relay Lambda entry point. Configuration is validated here, at cold start: a missing or malformed
 * variable fails the init with a message naming it, before any invocation is attempted.
 */
import { ignoreTransientDriverRejections, ServiceName } from '../../shared/platform/index.ts';
import { createRelay } from '../../shared/relay/index.ts';
import { createRelayHandler } from './relay-handler.ts';

// Settings, pool (OUTBOX_DB_POOL_SIZE, else publish concurrency + 1) and client from the environment.
const relay = createRelay({ applicationName: ServiceName.relay });
ignoreTransientDriverRejections((message) => console.warn(message));

/** The relay Lambda's handler (see relay-handler.ts). */
export const handler = createRelayHandler({ relay });
