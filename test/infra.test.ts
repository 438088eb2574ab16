import { Match, Template } from 'aws-cdk-lib/assertions';
import { beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../infra/app.ts';

let template: Template;
beforeAll(() => {
  const { stack } = buildApp();
  template = Template.fromStack(stack);
});

describe('demo stack (synthesised)', () => {
  it('runs the relay on nodejs24.x, arm64, with the bus name in its environment', () => {
    template.resourceCountIs('AWS::Lambda::Function', 1);
    template.hasResourceProperties('AWS::Lambda::Function', {
      Runtime: 'nodejs24.x',
      Architectures: ['arm64'],
      Environment: {
        Variables: Match.objectLike({
          EVENT_BUS_NAME: { Ref: Match.stringLikeRegexp('Bus') },
          NODE_OPTIONS: '--enable-source-maps',
        }),
      },
    });
  });

  it('lets the relay put events on its one bus only', () => {
    const policies = template.findResources('AWS::IAM::Policy');
    const statements = Object.values(policies).flatMap(
      (p) =>
        (p as { Properties: { PolicyDocument: { Statement: unknown[] } } }).Properties.PolicyDocument
          .Statement,
    );
    const putEvents = statements.filter((s) => (s as { Action: unknown }).Action === 'events:PutEvents');
    expect(putEvents).toEqual([
      {
        Action: 'events:PutEvents',
        Effect: 'Allow',
        Resource: { 'Fn::GetAtt': [expect.stringMatching(/Bus/), 'Arn'] },
      },
    ]);
  });

  it('invokes the relay every minute through EventBridge Scheduler', () => {
    template.resourceCountIs('AWS::Scheduler::Schedule', 1);
    template.hasResourceProperties('AWS::Scheduler::Schedule', {
      ScheduleExpression: 'rate(1 minute)',
      Target: Match.objectLike({ Arn: { 'Fn::GetAtt': [Match.stringLikeRegexp('RelayFunction'), 'Arn'] } }),
    });
  });
});
