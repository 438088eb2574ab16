/**
 * Who may put the outbox's events on the bus (docs/relay-construct.md#who-may-put-the-outboxs-sources-on-the-bus).
 *
 * EventBridge does not authenticate an entry's `Source`: any principal allowed `events:PutEvents`
 * on the bus may put an entry under the outbox's sources, and a well-formed envelope with a
 * far-ahead `sequence` then stops an `ignore-stale` consumer's chain (every real event after it is
 * stale) or moves a `wait-for-gap` one past a gap that is not there. So the construct adds one
 * statement to the bus's resource policy: Deny `events:PutEvents` with `events:source` among the
 * outbox's sources, for every principal whose `aws:PrincipalArn` is not the relay's role (or a
 * role of `publishers`).
 *
 * Facts it relies on: a bus's resource policy may condition PutEvents on `events:source` and
 * `events:detail-type` (EventBridge User Guide, "Permissions for event buses", the example that
 * limits a custom bus to one source and detail-type); for a role, `aws:PrincipalArn` is the role's
 * ARN, not the session's (IAM User Guide, global condition keys); an explicit Deny in any policy
 * that applies wins over every Allow (IAM policy evaluation logic). The monitor puts no events, so
 * only the relay is exempt.
 */
import { Annotations, Names, Stack, Token } from 'aws-cdk-lib';
import * as events from 'aws-cdk-lib/aws-events';
import * as eventsv2 from 'aws-cdk-lib/aws-eventsv2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type { Construct } from 'constructs';
import { OutboxConfigError } from '../shared/platform/errors.ts';
import type { OutboxRelayProps } from './props.ts';

/** The longest `Source` EventBridge accepts, characters (PutEventsRequestEntry). */
const MAX_SOURCE_LENGTH = 256;

/**
 * Checks {@link OutboxRelayProps.sources}: each as `enqueue` would accept it, and named once.
 * @throws naming the prop and the index of the first bad source
 */
export function checkSources(sources: readonly string[] | undefined): void {
  if (sources === undefined) return;
  if (sources.length === 0) {
    throw new Error(
      'OutboxRelay: sources must name at least one source (leave it unset on a bus of its own to let only the relay put events)',
    );
  }
  sources.forEach((source, i) => {
    const bad = (why: string) => new Error(`OutboxRelay: sources[${i}] ${JSON.stringify(source)} ${why}`);
    if (Token.isUnresolved(source)) throw bad('is a token: the sources must be known at synth');
    if (source.trim() === '' || source !== source.trim())
      throw bad('must be text without surrounding blanks');
    if (source.length > MAX_SOURCE_LENGTH) throw bad(`is over ${MAX_SOURCE_LENGTH} characters`);
    if (source.toLowerCase().startsWith('aws.'))
      throw bad('must not start with "aws." (reserved for AWS services)');
    if (sources.indexOf(source) !== i) throw bad('is named twice');
  });
}

/**
 * Adds the Deny statement to the bus's resource policy, or warns why it does not.
 * @param ownBus whether the construct created the bus (then, without sources, every source is denied)
 * @param relayRole the relay function's role: the one principal always exempt
 * @returns the policy resource, or undefined when none was added
 * @throws when the bus is in another account or region and `restrictPutEvents` is not `false`
 */
export function restrictPutEvents(
  scope: Construct,
  bus: events.IEventBus,
  ownBus: boolean,
  props: Pick<OutboxRelayProps, 'sources' | 'restrictPutEvents' | 'publishers'>,
  relayRole: iam.IRole,
): events.CfnEventBusPolicy | undefined {
  if (props.restrictPutEvents === false) {
    Annotations.of(scope).addWarningV2(
      'outbox-relay:bus-policy-off',
      `restrictPutEvents: false: any principal allowed events:PutEvents on the bus may put events under the outbox's sources, with any sequence, and consumers cannot tell them from the relay's. Deny it in the bus's policy yourself (docs/relay-construct.md#who-may-put-the-outboxs-sources-on-the-bus).`,
    );
    return undefined;
  }
  if (!ownBus && props.sources === undefined) {
    Annotations.of(scope).addWarningV2(
      'outbox-relay:bus-policy-unscoped',
      `The bus was passed in and sources is unset, so its policy is left as it is: any principal allowed events:PutEvents on it may put events under the outbox's sources, with any sequence. Set sources to the outbox's sources (docs/relay-construct.md#who-may-put-the-outboxs-sources-on-the-bus).`,
    );
    return undefined;
  }
  const stack = Stack.of(scope);
  const where = bus.env;
  for (const [what, theirs, ours] of [
    ['account', where.account, stack.account],
    ['region', where.region, stack.region],
  ] as const) {
    if (!Token.isUnresolved(theirs) && !Token.isUnresolved(ours) && theirs !== ours) {
      throw new Error(
        `OutboxRelay: the bus ${bus.eventBusArn} is in ${what} ${theirs}, this stack in ${ours}: its resource policy is not this stack's to change. Deny events:PutEvents of the outbox's sources to every principal but the relay's role there, and set restrictPutEvents: false`,
      );
    }
  }
  const statement = outboxSourcesStatement(scope, bus.eventBusArn, props, relayRole);
  return new events.CfnEventBusPolicy(scope, 'BusPolicy', {
    eventBusName: bus.eventBusName,
    statementId: statement.sid as string,
    statement: statement.toStatementJson(),
  });
}

/**
 * The Deny statement: `events:PutEvents` on `busArn`, with `events:source` among `sources` when
 * given, to every principal whose `aws:PrincipalArn` is not the relay's role or a publisher's.
 */
function outboxSourcesStatement(
  scope: Construct,
  busArn: string,
  props: Pick<OutboxRelayProps, 'sources' | 'publishers'>,
  relayRole: iam.IRole,
): iam.PolicyStatement {
  const exempt = [relayRole.roleArn, ...(props.publishers ?? []).map((r) => r.roleArn)];
  return new iam.PolicyStatement({
    sid: `OutboxSources${Names.uniqueResourceName(scope, { maxLength: 50 })}`,
    effect: iam.Effect.DENY,
    principals: [new iam.StarPrincipal()],
    actions: ['events:PutEvents'],
    resources: [busArn],
    conditions: {
      ...(props.sources ? { StringEquals: { 'events:source': props.sources } } : {}),
      ArnNotEquals: { 'aws:PrincipalArn': exempt.length === 1 ? exempt[0] : exempt },
    },
  });
}

/**
 * The same Deny statement on a Custom Event Bus (EventsV2), with a second one denying
 * `events:PutRawEvents` whatever the source (a raw event's bytes may be a forged envelope), whose resource policy is one document
 * (`AWS::EventsV2::ResourcePolicy`, the policy named `default`; creating it fails when the bus has
 * one, and an update replaces it whole). The condition key `events:source` is supplied on the
 * Custom Event Bus's PutEvents too (EventBridge User Guide, "Actions, resources, and condition keys
 * for the Custom Event Bus"). So the construct writes it only on a bus it created; on a bus passed
 * in it refuses `sources` unless `restrictPutEvents` is `false`, and warns without them.
 * @returns the policy resource, or undefined when none was written
 * @throws {OutboxConfigError} (`restrictPutEvents`) for `sources` on a bus passed in, unless `restrictPutEvents: false`
 */
export function restrictCustomBusPutEvents(
  scope: Construct,
  busArn: string,
  ownBus: boolean,
  props: Pick<OutboxRelayProps, 'sources' | 'restrictPutEvents' | 'publishers'>,
  relayRole: iam.IRole,
): eventsv2.CfnResourcePolicy | undefined {
  if (props.restrictPutEvents === false) {
    Annotations.of(scope).addWarningV2(
      'outbox-relay:bus-policy-off',
      `restrictPutEvents: false: any principal allowed events:PutEvents on the Custom Event Bus may put events under the outbox's sources, with any sequence, and consumers cannot tell them from the relay's. Deny it in the bus's resource policy yourself (docs/relay-construct.md#who-may-put-the-outboxs-sources-on-the-bus).`,
    );
    return undefined;
  }
  if (!ownBus) {
    if (props.sources !== undefined) {
      throw new OutboxConfigError(
        'restrictPutEvents',
        `OutboxRelay: the Custom Event Bus ${busArn} was passed in, and its resource policy is one document (AWS::EventsV2::ResourcePolicy) that this stack cannot add a statement to. Put the Deny of events:PutEvents of the outbox's sources to every principal but the relay's role in that bus's policy yourself, and set restrictPutEvents: false (docs/relay-construct.md#who-may-put-the-outboxs-sources-on-the-bus)`,
      );
    }
    Annotations.of(scope).addWarningV2(
      'outbox-relay:bus-policy-unscoped',
      `The Custom Event Bus was passed in, so its resource policy is left as it is: any principal allowed events:PutEvents on it may put events under the outbox's sources, with any sequence. Deny that in its policy and set restrictPutEvents: false (docs/relay-construct.md#who-may-put-the-outboxs-sources-on-the-bus).`,
    );
    return undefined;
  }
  const statement = outboxSourcesStatement(scope, busArn, props, relayRole);
  return new eventsv2.CfnResourcePolicy(scope, 'CustomBusPolicy', {
    eventBusArn: busArn,
    policyDocument: {
      Version: '2012-10-17',
      Statement: [
        statement.toStatementJson(),
        rawEventsStatement(props, relayRole, busArn).toStatementJson(),
      ],
    },
  });
}

/**
 * Deny `events:PutRawEvents` on the Custom Event Bus to every principal but the relay's role (and
 * the publishers'), whatever the source: a raw event's bytes may be an envelope that passes a
 * subscriber's `DATA` filter on source and detail-type, and the `events:source` key of such a
 * call is what the caller says. The relay never calls PutRawEvents.
 */
function rawEventsStatement(
  props: Pick<OutboxRelayProps, 'publishers'>,
  relayRole: iam.IRole,
  busArn: string,
): iam.PolicyStatement {
  const exempt = [relayRole.roleArn, ...(props.publishers ?? []).map((r) => r.roleArn)];
  return new iam.PolicyStatement({
    sid: 'OutboxNoRawEvents',
    effect: iam.Effect.DENY,
    principals: [new iam.StarPrincipal()],
    actions: ['events:PutRawEvents'],
    resources: [busArn],
    conditions: { ArnNotEquals: { 'aws:PrincipalArn': exempt.length === 1 ? exempt[0] : exempt } },
  });
}
