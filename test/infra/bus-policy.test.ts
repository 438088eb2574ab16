/**
 * The bus's resource policy (issue 33): EventBridge does not authenticate `Source`, so anyone
 * allowed PutEvents on the bus could put a well-formed envelope under the outbox's sources with a
 * far-ahead `sequence`, freezing an `ignore-stale` chain or making a `wait-for-gap` one jump. The
 * construct denies PutEvents of those sources to every principal but the relay's role
 * (docs/relay-construct.md#who-may-put-the-outboxs-sources-on-the-bus). Synthesised, not deployed: what
 * is checked is the statement the template carries.
 */
import { Duration, Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as events from 'aws-cdk-lib/aws-events';
import * as iam from 'aws-cdk-lib/aws-iam';
import { describe, expect, it } from 'vitest';
import type { OutboxRelayProps } from '../../infra/props.ts';
import { NO_BUNDLING, ORDERS, relayStack, useApps } from '../support/synth.ts';

// No bundling: the functions' code is not what these tests look at.
const newApp = useApps('outbox-bus-policy-test-', { context: NO_BUNDLING });

type Props = Partial<OutboxRelayProps> & { importBus?: 'same-account' | 'other-account' };

/** An OutboxRelay on imported network and proxy, with its own bus unless `importBus`. */
function relay(props: Props = {}) {
  const { importBus, ...rest } = props;
  const { stack, relay: outbox } = relayStack(newApp(), ORDERS, (stack) => {
    const eventBus =
      importBus === 'same-account'
        ? events.EventBus.fromEventBusName(stack, 'Bus', 'orders')
        : importBus === 'other-account'
          ? events.EventBus.fromEventBusArn(
              stack,
              'Bus',
              'arn:aws:events:eu-west-1:999999999999:event-bus/central',
            )
          : undefined;
    return { ...(eventBus ? { eventBus } : {}), ...rest };
  });
  return { outbox, stack, template: Template.fromStack(stack) };
}

type Statement = {
  Sid: string;
  Effect: string;
  Principal: unknown;
  Action: string;
  Resource: unknown;
  Condition: Record<string, Record<string, unknown>>;
};
/** The bus policies of the template, by logical id. */
function busPolicies(template: Template) {
  return Object.values(template.findResources('AWS::Events::EventBusPolicy')) as {
    Properties: { EventBusName: unknown; StatementId: string; Statement: Statement };
  }[];
}
/** The relay function's role, as the template references its ARN. */
function relayRoleArn(template: Template) {
  const fn = Object.values(
    template.findResources('AWS::Lambda::Function', {
      Properties: { Description: Match.stringLikeRegexp('^Outbox relay:') },
    }),
  )[0] as { Properties: { Role: { 'Fn::GetAtt': [string, string] } } };
  return fn.Properties.Role;
}
const warnings = (stack: Stack) =>
  Annotations.fromStack(stack)
    .findWarning('*', Match.anyValue())
    .map((w) => String(w.entry.data));

describe("the bus's resource policy: the outbox's sources only from the relay", () => {
  it("denies PutEvents of the outbox's sources on its own bus to every principal but the relay's role", () => {
    const { template, outbox } = relay({ sources: ['shop.orders', 'shop.billing'] });
    const policies = busPolicies(template);
    expect(policies).toHaveLength(1);
    const [policy] = policies;
    const busId = Object.keys(template.findResources('AWS::Events::EventBus'))[0];
    expect(policy?.Properties.EventBusName).toEqual({ Ref: busId });
    expect(policy?.Properties.StatementId).toBe(policy?.Properties.Statement.Sid);
    expect(policy?.Properties.Statement).toEqual({
      Sid: expect.any(String),
      Effect: 'Deny',
      Principal: '*',
      Action: 'events:PutEvents',
      Resource: { 'Fn::GetAtt': [busId, 'Arn'] },
      Condition: {
        // The heartbeat's source with them (it is on by default): no one else can fake a heartbeat.
        StringEquals: { 'events:source': ['shop.orders', 'shop.billing', 'outbox.heartbeat'] },
        ArnNotEquals: { 'aws:PrincipalArn': relayRoleArn(template) },
      },
    });
    expect(outbox.busPolicy).toBeDefined();
    // The relay keeps its own grant: an identity policy allowing PutEvents on the bus.
    template.hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Action: 'events:PutEvents',
            Effect: 'Allow',
            Resource: { 'Fn::GetAtt': [busId, 'Arn'] },
          }),
        ]),
      },
    });
  });

  it("denies the heartbeat's source to all but the relay exactly when the heartbeat is on", () => {
    const sourcesOf = (props: Props) =>
      busPolicies(relay(props).template)[0]?.Properties.Statement.Condition.StringEquals?.['events:source'];
    expect(sourcesOf({ sources: ['shop.orders'], heartbeat: { interval: Duration.minutes(2) } })).toEqual([
      'shop.orders',
      'outbox.heartbeat',
    ]);
    // Named by the user as well: once.
    expect(sourcesOf({ sources: ['outbox.heartbeat', 'shop.orders'] })).toEqual([
      'outbox.heartbeat',
      'shop.orders',
    ]);
    // No heartbeat: nothing the relay publishes carries it, the policy names the sources given.
    expect(sourcesOf({ sources: ['shop.orders'], heartbeat: false })).toEqual(['shop.orders']);
  });

  it('without sources, lets only the relay put any event on the bus it creates', () => {
    const { template } = relay();
    const [policy] = busPolicies(template);
    expect(policy?.Properties.Statement.Effect).toBe('Deny');
    expect(policy?.Properties.Statement.Condition).toEqual({
      ArnNotEquals: { 'aws:PrincipalArn': relayRoleArn(template) },
    });
  });

  it('exempts the roles named in publishers as well as the relay', () => {
    const operator = iam.Role.fromRoleArn(
      new Stack(newApp(), 'Operators'),
      'Operator',
      'arn:aws:iam::123456789012:role/outbox-operator',
    );
    const { template } = relay({ sources: ['shop.orders'], publishers: [operator] });
    expect(busPolicies(template)[0]?.Properties.Statement.Condition.ArnNotEquals).toEqual({
      'aws:PrincipalArn': [relayRoleArn(template), 'arn:aws:iam::123456789012:role/outbox-operator'],
    });
  });

  it('adds the statement to an imported bus of the same account when sources are given', () => {
    const { template } = relay({ importBus: 'same-account', sources: ['shop.orders'] });
    const [policy] = busPolicies(template);
    expect(policy?.Properties.EventBusName).toBe('orders');
    expect(policy?.Properties.Statement.Condition.StringEquals).toEqual({
      'events:source': ['shop.orders', 'outbox.heartbeat'],
    });
    expect(JSON.stringify(policy?.Properties.Statement.Resource)).toContain('event-bus/orders');
  });

  it('leaves an imported bus without sources as it is, and warns that anyone may put the outbox’s events on it', () => {
    const { template, stack, outbox } = relay({ importBus: 'same-account' });
    expect(busPolicies(template)).toEqual([]);
    expect(outbox.busPolicy).toBeUndefined();
    expect(warnings(stack).join('\n')).toMatch(/sources/);
  });

  it('adds no statement with restrictPutEvents: false, and says so', () => {
    const own = relay({ restrictPutEvents: false, sources: ['shop.orders'] });
    expect(busPolicies(own.template)).toEqual([]);
    expect(warnings(own.stack).join('\n')).toMatch(/restrictPutEvents/);
  });

  it("refuses to restrict a bus of another account (its policy is that account's), unless told not to", () => {
    expect(() => relay({ importBus: 'other-account', sources: ['shop.orders'] })).toThrow(
      /OutboxRelay: .*999999999999.*restrictPutEvents: false/,
    );
    const { template } = relay({
      importBus: 'other-account',
      sources: ['shop.orders'],
      restrictPutEvents: false,
    });
    expect(busPolicies(template)).toEqual([]);
  });

  it('refuses sources that no event could carry, naming the prop', () => {
    for (const [sources, message] of [
      [[], /sources must name at least one source/],
      [[''], /sources\[0\]/],
      [['shop.orders', ' '], /sources\[1\]/],
      [['aws.s3'], /sources\[0\].*aws\./],
      [['x'.repeat(257)], /sources\[0\].*256/],
      [['shop.orders', 'shop.orders'], /sources\[1\].*twice/],
    ] as const) {
      expect(() => relay({ sources: [...sources] }), JSON.stringify(sources)).toThrow(message);
    }
  });
});
