/**
 * The inbox's retentions agree at synth (issue 45; infra/retention.ts): the relay's monitor prunes
 * inbox records after `monitorSettings.inboxRetentionDays` (OUTBOX_INBOX_RETENTION_DAYS), each
 * consumer's inbox counts on them for `inboxRetentionDays`, and the bus can deliver again from
 * its retention (`customEventBus.retentionDays`) or an archive. A monitor that prunes sooner than a
 * consumer of its database keeps records fails synth (a replay between the two ages would be
 * applied twice); a bus or archive that keeps events longer than the records warns, naming both
 * settings (a replay beyond them is answered stale and applies nothing). Synthesised: the demo
 * app itself, and an app with a relay and a consumer.
 */
import { readFileSync } from 'node:fs';
import { Annotations as CdkAnnotations, Duration, type Stack } from 'aws-cdk-lib';
import { Annotations, Match } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { OrderPlaced } from '../../examples/billing/events.ts';
import { buildApp } from '../../examples/demo/app.ts';
import type { OutboxConsumerProps } from '../../infra/consumer-props.ts';
import { OutboxConsumer } from '../../infra/outbox-consumer.ts';
import type { OutboxRelayProps } from '../../infra/props.ts';
import { RetentionWarning } from '../../infra/retention.ts';
import { OutboxConfigError } from '../../shared/platform/errors.ts';
import { inlineFunction, NO_BUNDLING, ORDERS, relayStack, useApps } from '../support/synth.ts';

/** cdk.json's context (the feature flags), without bundling: the functions' code is not looked at. */
const context = {
  ...(
    JSON.parse(readFileSync(new URL('../../cdk.json', import.meta.url), 'utf8')) as {
      context: Record<string, unknown>;
    }
  ).context,
  ...NO_BUNDLING,
};
const newApp = useApps('outbox-retention-test-', { context });

/** The warnings of a stack with the given id (synthesises the app). */
function warnings(stack: Stack, id: string): string[] {
  return Annotations.fromStack(stack)
    .findWarning('*', Match.stringLikeRegexp(`\\[ack: ${id}\\]`))
    .map((w) => String(w.entry.data));
}

/** The error a function throws, or undefined. */
function thrown(f: () => unknown): unknown {
  try {
    f();
  } catch (error) {
    return error;
  }
  return undefined;
}

/** A consumer of the billing events with a function of its own (no bundling). */
function consumer(stack: Stack, id: string, props: Omit<OutboxConsumerProps, 'events' | 'existingFunction'>) {
  return new OutboxConsumer(stack, id, {
    events: [OrderPlaced],
    existingFunction: inlineFunction(stack, `${id}Function`, { timeout: Duration.seconds(20) }),
    ...props,
  });
}

describe('the demo app', () => {
  /** A second consumer, `audit`, counting on 60 days of inbox records, its inbox in `databaseName`. */
  const auditConsumer = (stack: ReturnType<typeof buildApp>['stack'], databaseName: string) =>
    consumer(stack, 'Audit', {
      consumer: 'audit',
      eventBus: stack.outbox.eventBus,
      vpc: stack.vpc,
      securityGroups: [],
      proxy: stack.proxy,
      databaseName,
      inboxRetentionDays: 60,
    });

  it('synthesises with the monitor and the billing consumer at the same retention, and no retention warning', () => {
    const { stack } = buildApp(newApp());
    expect(stack.outbox.monitorInboxRetentionDays).toBe(30);
    expect(stack.billing.environment.OUTBOX_INBOX_RETENTION_DAYS).toBe('30');
    expect(warnings(stack, RetentionWarning.monitor)).toEqual([]);
    expect(warnings(stack, RetentionWarning.consumerArchive)).toEqual([]);
  });

  it('refuses a second consumer in its database that counts on 60 days of records, naming both settings', () => {
    const { stack } = buildApp(newApp());
    const error = thrown(() => auditConsumer(stack, stack.outbox.databaseName));
    expect(error).toBeInstanceOf(OutboxConfigError);
    expect((error as OutboxConfigError).variable).toBe('monitorSettings.inboxRetentionDays');
    expect((error as Error).message).toMatch(
      /OutboxConsumer "audit": the monitor of OutboxRelayDemo\/Outbox prunes inbox records after 30 days \(monitorSettings\.inboxRetentionDays, OUTBOX_INBOX_RETENTION_DAYS\).*inboxRetentionDays 60.*applied twice/,
    );
  });

  it('takes that consumer when its inbox is in another database, which the monitor does not prune', () => {
    const { stack } = buildApp(newApp());
    expect(() => auditConsumer(stack, 'audit')).not.toThrow();
  });

  it('warns, naming the archive and both retentions, for an archive of its bus kept 90 days or indefinitely (added after the consumer)', () => {
    const { stack } = buildApp(newApp());
    stack.outbox.eventBus.archive('History', {
      eventPattern: { source: ['demo.shop'] },
      retention: Duration.days(90),
    });
    stack.outbox.eventBus.archive('Forever', { eventPattern: { source: ['demo.shop'] } });
    stack.outbox.eventBus.archive('Month', {
      eventPattern: { source: ['demo.shop'] },
      retention: Duration.days(30),
    });
    const relay = warnings(stack, RetentionWarning.monitor);
    expect(relay).toHaveLength(2);
    expect(relay[0]).toMatch(
      /archive OutboxRelayDemo\/Outbox\/Bus\/History of its bus keeps events 90 days.*monitorSettings\.inboxRetentionDays, OUTBOX_INBOX_RETENTION_DAYS: 30 days/,
    );
    expect(relay[1]).toMatch(
      /archive OutboxRelayDemo\/Outbox\/Bus\/Forever of its bus keeps events indefinitely/,
    );
    const billing = warnings(stack, RetentionWarning.consumerArchive);
    expect(billing).toHaveLength(2);
    expect(billing[0]).toMatch(
      /OutboxConsumer "billing": archive OutboxRelayDemo\/Outbox\/Bus\/History of its bus keeps events 90 days.*inboxRetentionDays 30.*stale \(beyond-retention\)/,
    );
    expect(billing.join('\n')).not.toMatch(/Month/);
  });

  it('lets an operator acknowledge the archive warnings by their ids', () => {
    const { stack } = buildApp(newApp());
    stack.outbox.eventBus.archive('Forever', { eventPattern: { source: ['demo.shop'] } });
    CdkAnnotations.of(stack.outbox).acknowledgeWarning(
      RetentionWarning.monitor,
      'kept for audit, never replayed',
    );
    CdkAnnotations.of(stack.billing).acknowledgeWarning(RetentionWarning.consumerArchive, 'kept for audit');
    expect(warnings(stack, RetentionWarning.monitor)).toEqual([]);
    expect(warnings(stack, RetentionWarning.consumerArchive)).toEqual([]);
  });
});

/** An app with an OutboxRelay on a proxy (ORDERS), and a consumer of its bus in its database. */
function relayApp(relayProps: Partial<OutboxRelayProps>) {
  const { stack, relay: outbox, base } = relayStack(newApp(), ORDERS, relayProps);
  let n = 0;
  const billing = (props: Partial<OutboxConsumerProps> = {}) =>
    consumer(stack, `Billing${n++ || ''}`, { ...base, ...props });
  return { stack, outbox, billing };
}

describe("the monitor's inbox retention against the consumers and the bus", () => {
  it('refuses a monitor pruning after 14 days beside a consumer at the default 30, naming both settings', () => {
    const { outbox, billing } = relayApp({ monitorSettings: { inboxRetentionDays: 14 } });
    expect(outbox.monitorInboxRetentionDays).toBe(14);
    const error = thrown(() => billing());
    expect((error as OutboxConfigError).variable).toBe('monitorSettings.inboxRetentionDays');
    expect((error as Error).message).toMatch(
      /after 14 days \(monitorSettings\.inboxRetentionDays, OUTBOX_INBOX_RETENTION_DAYS\).*\(inboxRetentionDays 30\).*at least 30.*at most 14/,
    );
    // The deprecated string map sets the same variable, and is read the same way.
    expect(
      thrown(() => relayApp({ monitorEnvironment: { OUTBOX_INBOX_RETENTION_DAYS: '14' } }).billing()),
    ).toMatchObject({ variable: 'monitorSettings.inboxRetentionDays' });
  });

  it('takes a monitor that keeps records as long as the consumer, or longer', () => {
    expect(() =>
      relayApp({ monitorSettings: { inboxRetentionDays: 60 } }).billing({ inboxRetentionDays: 60 }),
    ).not.toThrow();
    expect(() =>
      relayApp({ monitorSettings: { inboxRetentionDays: 90 } }).billing({ inboxRetentionDays: 14 }),
    ).not.toThrow();
  });

  it('warns when the Custom Event Bus keeps events longer than the monitor keeps records, and refuses its consumer', () => {
    const { stack, billing } = relayApp({ customEventBus: { retentionDays: 60 } });
    expect(warnings(stack, RetentionWarning.monitor)).toEqual([
      expect.stringMatching(
        /keeps events 60 days \(customEventBus\.retentionDays\), longer than its monitor keeps inbox records \(monitorSettings\.inboxRetentionDays, OUTBOX_INBOX_RETENTION_DAYS: 30 days\)/,
      ),
    ]);
    // A consumer keeping 60 days to cover the bus: the monitor would prune them at 30.
    expect(thrown(() => billing({ inboxRetentionDays: 60 }))).toMatchObject({
      variable: 'monitorSettings.inboxRetentionDays',
    });
    // At the consumer's default 30: the bus's retention is refused, as before.
    expect(thrown(() => billing())).toMatchObject({ variable: 'customEventBus.retentionDays' });
  });

  it('neither warns nor refuses when the monitor, the consumer and the bus agree', () => {
    const { stack, billing } = relayApp({
      customEventBus: { retentionDays: 60 },
      monitorSettings: { inboxRetentionDays: 60 },
    });
    billing({ inboxRetentionDays: 60 });
    expect(warnings(stack, RetentionWarning.monitor)).toEqual([]);
    expect(warnings(stack, RetentionWarning.consumerArchive)).toEqual([]);
  });
});
