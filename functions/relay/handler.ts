/**
 * Relay Lambda entry point. Configuration is validated here, at cold start: a missing or malformed
 * variable fails the init with a message naming it, before any invocation is attempted.
 */
import {
  ignoreTransientDriverRejections,
  loadRelaySettings,
  openPool,
  relayPoolSize,
  ServiceName,
} from '../../shared/platform/index.ts';
import { createEventBridgeClient } from '../../shared/relay/index.ts';
import { createRelayHandler } from './relay-handler.ts';

const settings = loadRelaySettings();
ignoreTransientDriverRejections((message) => console.warn(message));

/** The relay Lambda's handler (see relay-handler.ts). */
export const handler = createRelayHandler({
  settings,
  sql: openPool({ applicationName: ServiceName.relay, max: relayPoolSize(settings.publishConcurrency) }),
  client: createEventBridgeClient(),
});
