/**
 * The buses a pass publishes to, one module each: the interface both implement and what they share
 * (publisher.ts), the classic event bus (classic-bus.ts), the Custom Event Bus (custom-event-bus.ts)
 * and its PutEvents client (custom-event-bus-client.ts). The rest of the relay imports this file.
 */
export {
  createEventBridgeClient,
  eventBridgePublisher,
  packRequests,
  putEntries,
  toEntry,
} from './classic-bus.ts';
export {
  createEventsV2Client,
  EVENTSV2_MAX_ENTRIES_PER_REQUEST,
  eventGroupIdOf,
  eventsV2Publisher,
  MAX_EVENT_GROUP_ID_LENGTH,
  toEventsV2Entry,
} from './custom-event-bus.ts';
export {
  EVENTSV2_ENDPOINT_ENV,
  EventsV2Client,
  type EventsV2ClientConfig,
  EventsV2PutEventsCommand,
  type EventsV2PutEventsInput,
  type EventsV2PutEventsOutput,
} from './custom-event-bus-client.ts';
export {
  checkEventBridgeClient,
  type EntryOutcome,
  entryOutcome,
  isNoAnswer,
  PERMANENT_ENTRY_ERRORS,
  PUT_EVENTS_TIMEOUTS,
  type Publisher,
  type PublishRequest,
  PutEventsTimeoutError,
  requestFailure,
} from './publisher.ts';
export { PublishSpanAttribute, tracedPublisher } from './traced-publisher.ts';
