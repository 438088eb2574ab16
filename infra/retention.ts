/**
 * The inbox's retentions against each other, checked at synth (issue 45): how long the relay's
 * monitor keeps inbox records (`monitorSettings.inboxRetentionDays`, `OUTBOX_INBOX_RETENTION_DAYS`),
 * how long a consumer's inbox counts on having them (`inboxRetentionDays`), and how far back the bus
 * can deliver again (a Custom Event Bus's `customEventBus.retentionDays`, an archive's `retention`).
 *
 * The inbox answers an event with no record that is older than its retention `stale`
 * (`beyond-retention`) and applies it to no one; younger, it applies it. So:
 * - a monitor that prunes a consumer's records sooner than the consumer's retention makes the
 *   inbox apply again an event delivered again between the two ages (a bus replay, an operator's
 *   queue replay): a duplicate effect, which no set-up wants. Refused (OutboxConfigError), when the
 *   consumer's inbox is in the relay's database (the only one its monitor prunes);
 * - a bus or an archive that keeps events longer than the inbox's records promises replays that
 *   apply nothing: safe (each is recorded `stale`, counted `InboxStale`) but not what a replay is
 *   run for. A Custom Event Bus the relay creates is refused beside a consumer of the app
 *   (outbox-consumer.ts); an archive only warns, because archives are commonly kept for audit, and
 *   indefinitely by default (`retention` unset), with no replay beyond the retention in mind; the
 *   relay alone warns too, since it cannot tell whether any inbox lives in its database.
 * Each warning has an id, for `Annotations.of(scope).acknowledgeWarning(id)`.
 */
import { Annotations, Aspects, type IAspect } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import type { Construct, IConstruct } from 'constructs';
import { OutboxConfigError } from '../shared/platform/errors.ts';

/** What the checks read of an `OutboxRelay` of the app. */
export interface PruningRelay {
  readonly node: { readonly path: string };
  readonly databaseConnection: { readonly host: string };
  readonly databaseName: string;
  /** The monitor's `OUTBOX_INBOX_RETENTION_DAYS`, days. */
  readonly monitorInboxRetentionDays: number;
}

/** The warning ids (`Annotations.acknowledgeWarning`). */
export const RetentionWarning = {
  /** OutboxRelay: its bus or an archive of it keeps events longer than its monitor keeps inbox records. */
  monitor: 'outbox-relay:monitor-inbox-retention',
  /** OutboxConsumer: an archive of its bus keeps events longer than its inbox keeps records. */
  consumerArchive: 'outbox-relay:inbox-retention-archive',
} as const;

/**
 * Refuses a consumer whose inbox records a monitor of the app prunes sooner than the consumer's
 * `inboxRetentionDays`: the relays whose database (host and name) is the consumer's.
 * @throws {OutboxConfigError} (`monitorSettings.inboxRetentionDays`) naming both settings and the relay
 */
export function checkMonitorKeepsInbox(
  consumer: string,
  inboxRetentionDays: number,
  database: { host: string; databaseName: string },
  relays: readonly PruningRelay[],
): void {
  for (const relay of relays) {
    if (relay.databaseConnection.host !== database.host || relay.databaseName !== database.databaseName)
      continue;
    const monitorDays = relay.monitorInboxRetentionDays;
    if (monitorDays >= inboxRetentionDays) continue;
    throw new OutboxConfigError(
      'monitorSettings.inboxRetentionDays',
      `OutboxConsumer ${JSON.stringify(consumer)}: the monitor of ${relay.node.path} prunes inbox records after ${monitorDays} days (monitorSettings.inboxRetentionDays, OUTBOX_INBOX_RETENTION_DAYS), sooner than this consumer's inbox counts on keeping them (inboxRetentionDays ${inboxRetentionDays}): an event delivered again between ${monitorDays} and ${inboxRetentionDays} days old (a bus or queue replay) would find its record pruned and be applied twice. Set the relay's monitorSettings.inboxRetentionDays to at least ${inboxRetentionDays}, or this consumer's inboxRetentionDays to at most ${monitorDays}`,
    );
  }
}

/** An archive of the bus whose ARN is `busArn` in the app: its path and retention (undefined: indefinite). */
interface BusArchive {
  path: string;
  days: number | undefined;
}

function archivesOf(scope: IConstruct, busArn: string): BusArchive[] {
  return scope.node.root.node
    .findAll()
    .filter((c): c is events.CfnArchive => c instanceof events.CfnArchive && c.sourceArn === busArn)
    .map((a) => ({
      // The L2 Archive's path, which its props name, rather than its CfnArchive child's.
      path: a.node.scope?.node.defaultChild === a ? (a.node.scope as IConstruct).node.path : a.node.path,
      // 0 or unset: kept indefinitely (AWS::Events::Archive RetentionDays).
      days: a.retentionDays ? a.retentionDays : undefined,
    }));
}

const kept = (days: number | undefined) => (days === undefined ? 'indefinitely' : `${days} days`);

/**
 * At synth (an archive may be added after the construct), warns for each archive of `bus` that
 * keeps events longer than `days`; `say` words the warning for one archive.
 */
function warnOnArchives(
  scope: Construct,
  id: string,
  bus: () => events.IEventBus | undefined,
  days: number,
  say: (archive: BusArchive) => string,
): void {
  const aspect: IAspect = {
    visit: (node) => {
      if (node !== scope) return;
      const b = bus();
      if (!b) return;
      for (const archive of archivesOf(scope, b.eventBusArn)) {
        if (archive.days !== undefined && archive.days <= days) continue;
        Annotations.of(scope).addWarningV2(id, say(archive));
      }
    },
  };
  Aspects.of(scope).add(aspect);
}

/**
 * OutboxRelay: warns when its Custom Event Bus, or an archive of its classic bus, keeps events
 * longer than its monitor keeps inbox records.
 */
export function warnOnRelayReplayWindow(
  relay: Construct,
  monitorDays: number,
  customBusDays: number | undefined,
  classicBus: () => events.IEventBus | undefined,
): void {
  const consequence = `a replay of events older than ${monitorDays} days finds their inbox records pruned: an inbox whose inboxRetentionDays is at most ${monitorDays} answers them stale (beyond-retention) and applies none, one whose retention is longer would apply them twice (an OutboxConsumer of this app in this database is refused)`;
  if (customBusDays !== undefined && customBusDays > monitorDays) {
    Annotations.of(relay).addWarningV2(
      RetentionWarning.monitor,
      `OutboxRelay: its Custom Event Bus keeps events ${customBusDays} days (customEventBus.retentionDays), longer than its monitor keeps inbox records (monitorSettings.inboxRetentionDays, OUTBOX_INBOX_RETENTION_DAYS: ${monitorDays} days): ${consequence}. Raise monitorSettings.inboxRetentionDays to ${customBusDays}, or lower customEventBus.retentionDays`,
    );
  }
  warnOnArchives(
    relay,
    RetentionWarning.monitor,
    classicBus,
    monitorDays,
    (a) =>
      `OutboxRelay: archive ${a.path} of its bus keeps events ${kept(a.days)} (its retention), longer than its monitor keeps inbox records (monitorSettings.inboxRetentionDays, OUTBOX_INBOX_RETENTION_DAYS: ${monitorDays} days): ${consequence}. Keep the archive's retention within ${monitorDays} days, or raise monitorSettings.inboxRetentionDays (and the consumers' inboxRetentionDays) to the replays you may run`,
  );
}

/** OutboxConsumer: warns when an archive of its classic bus keeps events longer than its inbox's records. */
export function warnOnConsumerArchives(
  consumer: Construct,
  name: string,
  inboxRetentionDays: number,
  bus: events.IEventBus | undefined,
): void {
  warnOnArchives(
    consumer,
    RetentionWarning.consumerArchive,
    () => bus,
    inboxRetentionDays,
    (a) =>
      `OutboxConsumer ${JSON.stringify(name)}: archive ${a.path} of its bus keeps events ${kept(a.days)} (its retention), longer than its inbox keeps records (inboxRetentionDays ${inboxRetentionDays}): a replay of events older than ${inboxRetentionDays} days is answered stale (beyond-retention) and applies nothing. Raise inboxRetentionDays (and the relay's monitorSettings.inboxRetentionDays) to the replays you may run, or keep the archive's retention within ${inboxRetentionDays} days`,
  );
}
