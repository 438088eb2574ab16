/**
 * The failure queues' alarm descriptions (they give the replay command) stay within CloudWatch's
 * 1,024 characters once CloudFormation fills in the queue URLs and the function's name, whatever the
 * consumer's name (up to the 47 bytes its role allows), and give a command a shell runs as printed.
 */
import { App, type Stack, Token, Tokenization } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { describe, expect, it } from 'vitest';
import { OutboxConsumer } from '../../infra/outbox-consumer.ts';
import { inlineFunction, relayStack } from '../support/synth.ts';

/** The longest a queue URL (an 80-character name) and a function name (64) can resolve to. */
const QUEUE_URL = 'https://sqs.ap-southeast-1.amazonaws.com.cn/123456789012/'.length + 80;
const FUNCTION_NAME = 64;

function consumerWith(consumer: string, topology: 'direct' | 'queue') {
  const { stack, base } = relayStack(new App());
  const c = new OutboxConsumer(stack, 'C', {
    ...base,
    consumer,
    existingFunction: inlineFunction(stack, 'Own'),
    topology,
  });
  return { stack, c };
}

/** The description's longest resolved length: its text, and each reference at its longest. */
function longest(stack: Stack, description: string): number {
  const resolved = stack.resolve(description) as string | { 'Fn::Join': [string, unknown[]] };
  if (typeof resolved === 'string') return resolved.length;
  return resolved['Fn::Join'][1].reduce<number>((sum, p) => {
    if (typeof p === 'string') return sum + p.length;
    const ref = JSON.stringify(p);
    return sum + (/Queue/.test(ref) ? QUEUE_URL : FUNCTION_NAME);
  }, 0);
}

describe('OutboxConsumer failure-queue alarms', () => {
  it.each(['direct', 'queue'] as const)(
    'stay within 1,024 characters with a 47-byte consumer name (%s topology)',
    (topology) => {
      const { stack, c } = consumerWith('c'.repeat(47), topology);
      for (const alarm of [c.alarms.undelivered, c.alarms.failed]) {
        const description = (alarm.node.defaultChild as unknown as { alarmDescription: string })
          .alarmDescription;
        expect(Token.isUnresolved(description)).toBe(true);
        expect(longest(stack, description)).toBeLessThanOrEqual(1024);
        expect(Tokenization.reverseString(description).tokens.length).toBeGreaterThan(0);
        expect(description).toContain('outbox inbox queue replay --queue-url');
      }
      Template.fromStack(stack);
    },
  );

  it('quote a consumer name a shell would split', () => {
    const { c } = consumerWith('billing eu', 'direct');
    const description = (c.alarms.failed.node.defaultChild as unknown as { alarmDescription: string })
      .alarmDescription;
    expect(description).toContain("--consumer 'billing eu' --function-name");
  });
});
