import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { App, type AppProps, Duration, Stack, Validations } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as rds from 'aws-cdk-lib/aws-rds';
import * as scheduler from 'aws-cdk-lib/aws-scheduler';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { CURRENTLY_RECOMMENDED_FLAGS } from 'aws-cdk-lib/cx-api';
import { AwsSolutionsChecks } from 'cdk-nag';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { buildApp } from '../../examples/demo/app.ts';
import { OutboxDemoStack } from '../../examples/demo/demo-stack.ts';
import { RUNBOOK_ANCHORS } from '../../infra/observability.ts';
import { OutboxRelay } from '../../infra/outbox-relay.ts';
import { ECONOMY_IDLE_RETURN_SECONDS } from '../../infra/props.ts';
import { loadRelaySettings, migrateConfigSchema, parseEnv } from '../../shared/platform/config.ts';
import { OutboxConfigError } from '../../shared/platform/errors.ts';
import { EnvVar } from '../../shared/platform/names.ts';
import { docsAwsCommands, markdownSection } from '../support/runbook-commands.ts';

// Every App in this file synthesises under one private directory, removed when the file ends. An App
// built without an outdir makes its own `cdk.out*` directory in os.tmpdir() that nothing removes, so
// TMPDIR points at an empty folder inside the private one while the tests run: whatever lands there
// is a leak, and the last hook fails on it.
const workRoot = mkdtempSync(join(tmpdir(), 'outbox-cdk-test-'));
const strayTmp = join(workRoot, 'tmp');
mkdirSync(strayTmp);
beforeAll(() => {
  vi.stubEnv('TMPDIR', strayTmp);
});
afterAll(() => {
  // Only synthesis output counts: Node keeps its shared compile cache in the temp dir too.
  const stray = readdirSync(strayTmp).filter((name) => /^(cdk\.out|outbox-cdk-test-)/.test(name));
  vi.unstubAllEnvs();
  rmSync(workRoot, { recursive: true, force: true });
  expect(stray, 'an App synthesised into the temp dir: create it with newApp()').toEqual([]);
});

/** An App whose cloud assembly goes under this file's private directory. */
function newApp(props: AppProps = {}): App {
  return new App({ outdir: mkdtempSync(join(workRoot, 'cdk.out-')), ...props });
}

/** cdk.json's context (the feature flags): `cdk synth` passes it to the app, so the tests do too. */
const cdkContext = (
  JSON.parse(readFileSync(new URL('../../cdk.json', import.meta.url), 'utf8')) as {
    context: Record<string, unknown>;
  }
).context;

let template: Template;
let synthError: unknown;
let demoStackName: string;
beforeAll(() => {
  const app = newApp({ context: cdkContext });
  // cdk-nag's AwsSolutions pack: synthesis fails on any finding that is not acknowledged with a reason.
  Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
  const { stack } = buildApp(app);
  demoStackName = stack.stackName;
  try {
    app.synth();
  } catch (error) {
    synthError = error;
  }
  template = Template.fromStack(stack);
}, 120_000);

type Statement = { Action: string | string[]; Effect: string; Resource: unknown };
function statementsOf(policyIdPrefix: string): Statement[] {
  const policies = template.findResources('AWS::IAM::Policy');
  const entry = Object.entries(policies).find(([id]) => id.startsWith(policyIdPrefix));
  expect(entry, `a policy starting with ${policyIdPrefix}`).toBeDefined();
  const policy = entry?.[1] as { Properties: { PolicyDocument: { Statement: Statement[] } } } | undefined;
  return policy?.Properties.PolicyDocument.Statement ?? [];
}
/** `arn:…:rds-db:<region>:<account>:dbuser:<resource id>/<user>`, as the template spells it. */
const rdsDbUser = (resourceId: unknown, user: string) => ({
  'Fn::Join': [
    '',
    [
      'arn:',
      { Ref: 'AWS::Partition' },
      ':rds-db:',
      { Ref: 'AWS::Region' },
      ':',
      { Ref: 'AWS::AccountId' },
      ':dbuser:',
      resourceId,
      `/${user}`,
    ],
  ],
});
/** A client's `rds-db:connect` resource: the proxy's id, cut from its ARN. */
const dbUserArn = (user: string) =>
  rdsDbUser(
    {
      'Fn::Select': [
        6,
        { 'Fn::Split': [':', { 'Fn::GetAtt': [Match.stringLikeRegexp('^DatabaseProxy'), 'DBProxyArn'] }] },
      ],
    },
    user,
  );

describe('demo stack (synthesised)', () => {
  it('passes cdk-nag AwsSolutions with every finding acknowledged', () => {
    expect(synthError).toBeUndefined();
  });

  it('has the resources of a complete system, and no NAT gateway', () => {
    for (const [type, count] of [
      ['AWS::RDS::DBInstance', 1],
      ['AWS::RDS::DBProxy', 1],
      ['AWS::Events::EventBus', 1],
      ['AWS::Scheduler::Schedule', 2],
      // eight of the relay's; the example consumer's two failure queues, errors, parked events, lag
      // and heartbeat
      ['AWS::CloudWatch::Alarm', 14],
      ['AWS::Events::Rule', 1],
      ['AWS::SQS::Queue', 2],
      ['AWS::CloudWatch::Dashboard', 1],
      ['AWS::SNS::Topic', 1],
      ['AWS::EC2::VPCEndpoint', 2],
      ['Custom::Trigger', 1],
      ['AWS::EC2::NatGateway', 0],
    ] as const) {
      template.resourceCountIs(type, count);
    }
    template.hasResourceProperties('AWS::RDS::DBInstance', {
      StorageEncrypted: true,
      EnableIAMDatabaseAuthentication: true,
    });
    template.hasResourceProperties('AWS::SNS::Topic', { KmsMasterKeyId: Match.anyValue() });
  });

  it("lets only the relay put the demo's source (demo.shop) and the heartbeat's on the bus", () => {
    const policies = Object.values(template.findResources('AWS::Events::EventBusPolicy')) as {
      Properties: { Statement: { Effect: string; Condition: Record<string, Record<string, unknown>> } };
    }[];
    expect(policies).toHaveLength(1);
    expect(policies[0]?.Properties.Statement).toMatchObject({
      Effect: 'Deny',
      Principal: '*',
      Action: 'events:PutEvents',
      Condition: {
        StringEquals: { 'events:source': ['demo.shop', 'outbox.heartbeat'] },
        ArnNotEquals: {
          'aws:PrincipalArn': {
            'Fn::GetAtt': [expect.stringMatching(/^OutboxRelayFunctionServiceRole/), 'Arn'],
          },
        },
      },
    });
  });

  it('runs the relay and the monitor on nodejs24.x, arm64, with IAM auth to the proxy and no secrets in the environment', () => {
    const functions = template.findResources('AWS::Lambda::Function', {
      Properties: { Runtime: 'nodejs24.x' },
    });
    const byDescription = (d: string) =>
      Object.values(functions).find((f) =>
        String((f as { Properties: { Description?: string } }).Properties.Description).startsWith(d),
      ) as
        | {
            Properties: {
              Architectures: string[];
              Environment: { Variables: Record<string, unknown> };
              Timeout: number;
              MemorySize: number;
            };
          }
        | undefined;
    const relay = byDescription('Outbox relay');
    const monitor = byDescription('Outbox monitor');
    const migrate = byDescription('Outbox migrations');
    expect(relay?.Properties.Architectures).toEqual(['arm64']);
    // 90 s on a one-minute schedule: each invocation still polls when the next one starts (issue 19).
    expect(relay?.Properties).toMatchObject({ Timeout: 90, MemorySize: 512 });
    expect(relay?.Properties.Environment.Variables.EVENT_BUS_NAME).toEqual({
      Ref: expect.stringMatching(/^OutboxBus/),
    });
    expect(relay?.Properties.Environment.Variables).toMatchObject({
      PGUSER: 'outbox_relay',
      PGDATABASE: 'app',
      PGPORT: '5432',
      OUTBOX_DB_IAM_AUTH: 'true',
      OUTBOX_DB_POOLER: 'transaction',
      NODE_OPTIONS: '--enable-source-maps',
    });
    // Lambda's Node runtimes load the RDS CA bundle only when this points at it (issue 11, item 2).
    for (const fn of [relay, monitor, migrate]) {
      expect(fn?.Properties.Environment.Variables.NODE_EXTRA_CA_CERTS).toBe('/var/runtime/ca-cert.pem');
    }
    expect(Object.keys(relay?.Properties.Environment.Variables ?? {}).sort()).toEqual(
      [
        'EVENT_BUS_NAME',
        'NODE_EXTRA_CA_CERTS',
        'NODE_OPTIONS',
        'OUTBOX_DB_IAM_AUTH',
        'OUTBOX_DB_POOLER',
        'OUTBOX_METRIC_NAMESPACE',
        'PGDATABASE',
        'PGHOST',
        'PGPORT',
        'PGUSER',
        'POWERTOOLS_SERVICE_NAME',
      ].sort(),
    );
    expect(monitor?.Properties.Environment.Variables).toMatchObject({
      PGUSER: 'outbox_monitor',
      OUTBOX_DB_IAM_AUTH: 'true',
    });
    // Lambda's Node 20+ runtimes load the Amazon RDS CA bundle only when pointed at it; without it,
    // verified TLS to the instance or the proxy fails.
    for (const f of [relay, monitor, migrate]) {
      expect(f?.Properties.Environment.Variables.NODE_EXTRA_CA_CERTS).toBe('/var/runtime/ca-cert.pem');
    }
    expect(migrate?.Properties.Environment.Variables.DB_SECRET_ARN).toEqual({
      Ref: expect.stringMatching(/^DatabaseSecretAttachment/),
    });
    for (const f of [relay, monitor, migrate]) {
      expect(JSON.stringify(f?.Properties.Environment.Variables)).not.toMatch(/PASSWORD|SecretString/i);
    }
  });

  it('grants each function exactly what it needs', () => {
    expect(statementsOf('OutboxRelayFunctionServiceRoleDefaultPolicy')).toEqual([
      {
        Action: 'events:PutEvents',
        Effect: 'Allow',
        Resource: { 'Fn::GetAtt': [expect.stringMatching(/^OutboxBus/), 'Arn'] },
      },
      { Action: 'rds-db:connect', Effect: 'Allow', Resource: expect.anything() },
    ]);
    template.hasResourceProperties('AWS::IAM::Policy', {
      PolicyName: Match.stringLikeRegexp('^OutboxRelayFunction'),
      PolicyDocument: {
        Statement: Match.arrayWith([
          { Action: 'rds-db:connect', Effect: 'Allow', Resource: dbUserArn('outbox_relay') },
        ]),
      },
    });
    // The monitor starts extra relays (scale-out): it may invoke the relay function, and no other.
    const relayArn = { 'Fn::GetAtt': [expect.stringMatching(/^OutboxRelayFunction/), 'Arn'] };
    expect(statementsOf('OutboxMonitorFunctionServiceRoleDefaultPolicy')).toEqual([
      { Action: 'rds-db:connect', Effect: 'Allow', Resource: expect.anything() },
      {
        Action: 'lambda:InvokeFunction',
        Effect: 'Allow',
        Resource: [relayArn, { 'Fn::Join': ['', [relayArn, ':*']] }],
      },
    ]);
    template.hasResourceProperties('AWS::IAM::Policy', {
      PolicyName: Match.stringLikeRegexp('^OutboxMonitorFunction'),
      PolicyDocument: {
        Statement: Match.arrayWith([
          { Action: 'rds-db:connect', Effect: 'Allow', Resource: dbUserArn('outbox_monitor') },
        ]),
      },
    });
    expect(statementsOf('OutboxMigrateFunctionServiceRoleDefaultPolicy')).toEqual([
      {
        Action: ['secretsmanager:DescribeSecret', 'secretsmanager:GetSecretValue'],
        Effect: 'Allow',
        Resource: { Ref: expect.stringMatching(/^DatabaseSecretAttachment/) },
      },
    ]);
  });

  it('requires TLS and end-to-end IAM authentication on the proxy, and reaches EventBridge through an interface endpoint', () => {
    template.hasResourceProperties('AWS::RDS::DBProxy', {
      RequireTLS: true,
      EngineFamily: 'POSTGRESQL',
      DefaultAuthScheme: 'IAM_AUTH',
      Auth: Match.absent(),
    });
    template.hasResourceProperties('AWS::EC2::VPCEndpoint', {
      ServiceName: { 'Fn::Join': ['', ['com.amazonaws.', { Ref: 'AWS::Region' }, '.events']] },
      VpcEndpointType: 'Interface',
      PrivateDnsEnabled: true,
    });
  });

  it("lets the proxy log in to the instance with IAM as the deployment's roles only, and read no secret", () => {
    // End-to-end IAM: the proxy signs its own token for the instance, as the client's user, with
    // its role's rds-db:connect on dbuser:<DbiResourceId>/<user>. Without it (or a secret per
    // user) every client connection is refused.
    const proxy = Object.values(template.findResources('AWS::RDS::DBProxy'))[0] as {
      Properties: { RoleArn: { 'Fn::GetAtt': [string, string] } };
    };
    const roleId = proxy.Properties.RoleArn['Fn::GetAtt'][0];
    const policies = Object.values(template.findResources('AWS::IAM::Policy')).filter((p) =>
      JSON.stringify((p as { Properties: { Roles: unknown } }).Properties.Roles).includes(`"${roleId}"`),
    ) as { Properties: { PolicyDocument: { Statement: Statement[] } } }[];
    const statements = policies.flatMap((p) => p.Properties.PolicyDocument.Statement);
    expect(statements.map((x) => x.Action)).toEqual(['rds-db:connect']);
    // The proxy's own login: the instance's resource id.
    const instanceUser = (user: string) =>
      rdsDbUser({ 'Fn::GetAtt': [expect.stringMatching(/^Database[A-Z0-9]{8}$/), 'DbiResourceId'] }, user);
    const resources = statements[0]?.Resource as unknown[];
    expect(resources).toHaveLength(4);
    expect(resources).toEqual(
      expect.arrayContaining(
        ['outbox_relay', 'outbox_monitor', 'outbox_producer', 'outbox_consumer'].map(instanceUser),
      ),
    );
  });

  it('lets only the migrate function reach the instance directly; the relay and the monitor reach only the proxy', () => {
    type Rule = { Type: string; Properties: Record<string, unknown> };
    const groupOf = (ref: unknown) => (ref as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
    const rules = Object.values(template.toJSON().Resources as Record<string, Rule>)
      .filter((r) => /^AWS::EC2::SecurityGroup(Ingress|Egress)$/.test(r.Type))
      .map((r) => ({
        direction: r.Type.endsWith('Ingress') ? 'in' : 'out',
        group: groupOf(r.Properties.GroupId),
        peer: groupOf(r.Properties.SourceSecurityGroupId ?? r.Properties.DestinationSecurityGroupId),
      }));
    const sgOf = (description: string) => {
      const f = Object.values(
        template.findResources('AWS::Lambda::Function', {
          Properties: { Description: Match.stringLikeRegexp(`^${description}`) },
        }),
      )[0] as { Properties: { VpcConfig: { SecurityGroupIds: unknown[] } } };
      return f.Properties.VpcConfig.SecurityGroupIds.map(groupOf);
    };
    const [relaySgs, monitorSgs, migrateSgs] = [
      sgOf('Outbox relay:'),
      sgOf('Outbox monitor:'),
      sgOf('Outbox migrations:'),
    ];
    expect(migrateSgs.filter((g) => [...relaySgs, ...monitorSgs].includes(g))).toEqual([]);
    const instance = Object.values(template.findResources('AWS::RDS::DBInstance'))[0] as {
      Properties: { VPCSecurityGroups: unknown[] };
    };
    const dbSgs = instance.Properties.VPCSecurityGroups.map(groupOf);
    const proxy = Object.values(template.findResources('AWS::RDS::DBProxy'))[0] as {
      Properties: { VpcSecurityGroupIds: unknown[] };
    };
    const proxySgs = proxy.Properties.VpcSecurityGroupIds.map(groupOf);
    const intoDb = rules.filter((r) => r.direction === 'in' && dbSgs.includes(r.group)).map((r) => r.peer);
    // Exactly one rule per peer: addProxy already opens the instance to the proxy (both directions),
    // and a second, identical rule would delete the shared one when removed.
    expect(intoDb.sort()).toEqual([...proxySgs, ...migrateSgs].sort());
    const proxyToDb = rules.filter(
      (r) => r.direction === 'out' && proxySgs.includes(r.group) && dbSgs.includes(r.peer),
    );
    expect(proxyToDb).toHaveLength(1);
    for (const g of [...relaySgs, ...monitorSgs]) {
      expect(rules.filter((r) => r.direction === 'out' && r.group === g && dbSgs.includes(r.peer))).toEqual(
        [],
      );
    }
    const migrateOut = rules
      .filter((r) => r.direction === 'out' && migrateSgs.includes(r.group))
      .map((r) => r.peer);
    expect(migrateOut).toEqual(expect.arrayContaining(dbSgs));
    expect(migrateOut.filter((g) => proxySgs.includes(g))).toEqual([]);
  });

  it('runs the migrations only once the network they use is in place', () => {
    // The migrate function reads the admin secret through the Secrets Manager endpoint and connects
    // to the instance through two security group rules; if the Trigger runs first, it times out and
    // the first deploy rolls back.
    const trigger = Object.values(template.findResources('Custom::Trigger'))[0] as { DependsOn: string[] };
    const resources = template.toJSON().Resources as Record<
      string,
      { Type: string; Properties: Record<string, unknown> }
    >;
    const secretsEndpoint = Object.entries(resources).find(
      ([, r]) =>
        r.Type === 'AWS::EC2::VPCEndpoint' &&
        JSON.stringify(r.Properties.ServiceName).includes('.secretsmanager'),
    )?.[0];
    expect(trigger.DependsOn).toContain(secretsEndpoint);
    const migrateFn = Object.values(
      template.findResources('AWS::Lambda::Function', {
        Properties: { Description: Match.stringLikeRegexp('^Outbox migrations:') },
      }),
    )[0] as { Properties: { VpcConfig: { SecurityGroupIds: { 'Fn::GetAtt': [string, string] }[] } } };
    const migrateSg = migrateFn.Properties.VpcConfig.SecurityGroupIds[0]?.['Fn::GetAtt'][0];
    const migrateRules = Object.entries(resources)
      .filter(([, r]) => /^AWS::EC2::SecurityGroup(Ingress|Egress)$/.test(r.Type))
      .filter(([, r]) => JSON.stringify(r.Properties).includes(`"${migrateSg}"`))
      .map(([id]) => id);
    expect(migrateRules.length).toBeGreaterThanOrEqual(4);
    expect(trigger.DependsOn).toEqual(expect.arrayContaining(migrateRules));
  });

  it('invokes both functions every minute, and only after the migrations ran', () => {
    const schedules = template.findResources('AWS::Scheduler::Schedule');
    const trigger = Object.keys(template.findResources('Custom::Trigger'))[0];
    expect(Object.values(schedules)).toHaveLength(2);
    for (const s of Object.values(schedules) as {
      DependsOn: string[];
      Properties: { ScheduleExpression: string; FlexibleTimeWindow: { Mode: string } };
    }[]) {
      expect(s.Properties.ScheduleExpression).toBe('rate(1 minute)');
      expect(s.Properties.FlexibleTimeWindow).toEqual({ Mode: 'OFF' });
      expect(s.DependsOn).toContain(trigger);
      // And only once their role may invoke the functions: an early invocation is denied and dropped.
      expect(s.DependsOn).toEqual(
        expect.arrayContaining([expect.stringMatching(/^OutboxSchedulerRoleDefaultPolicy/)]),
      );
    }
    // On an update, new code must not run against the old schema: the functions themselves (not
    // only their schedules) are updated after the migrations.
    const functions = template.findResources('AWS::Lambda::Function', {
      Properties: { Description: Match.stringLikeRegexp('^Outbox (relay|monitor):') },
    }) as Record<string, { DependsOn?: string[] }>;
    expect(Object.keys(functions)).toHaveLength(2);
    for (const f of Object.values(functions)) expect(f.DependsOn).toContain(trigger);
    const triggerResource = template.findResources('Custom::Trigger')[trigger as string] as {
      DependsOn: string[];
    };
    expect(triggerResource.DependsOn).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/^Database[A-Z0-9]/),
        expect.stringMatching(/^DatabaseProxy[A-Z0-9]/),
        expect.stringMatching(/^ProxyRoleDefaultPolicy/),
      ]),
    );
  });

  it('drops a failed or late scheduled invocation instead of replaying it (async invoke config)', () => {
    // Scheduler invokes asynchronously; Lambda's defaults retry a failure twice and keep a throttled
    // event for 6 hours. The next schedule is a minute away, so replays only pile up.
    const functions = template.findResources('AWS::Lambda::Function', {
      Properties: { Description: Match.stringLikeRegexp('^Outbox (relay|monitor):') },
    });
    expect(Object.keys(functions)).toHaveLength(2);
    for (const id of Object.keys(functions)) {
      template.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
        FunctionName: { Ref: id },
        Qualifier: '$LATEST',
        MaximumRetryAttempts: 0,
        MaximumEventAgeInSeconds: 60,
      });
      // No reserved concurrency by default: see docs/relay-construct.md#scheduled-invocations for why.
      expect(
        (functions[id] as { Properties: Record<string, unknown> }).Properties.ReservedConcurrentExecutions,
      ).toBeUndefined();
    }
  });

  it('lets CloudWatch alarms of this account and region publish to the alarm topic and use its key', () => {
    // Alarms publish as cloudwatch.amazonaws.com: the topic policy must allow it (the SSL-only
    // policy replaces SNS's default one), and so must the key policy, or every notification fails.
    const fromOurAlarms = {
      StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } },
      ArnLike: {
        'aws:SourceArn': {
          'Fn::Join': [
            '',
            [
              'arn:',
              { Ref: 'AWS::Partition' },
              ':cloudwatch:',
              { Ref: 'AWS::Region' },
              ':',
              { Ref: 'AWS::AccountId' },
              ':alarm:*',
            ],
          ],
        },
      },
    };
    const topics = template.findResources('AWS::SNS::Topic');
    const [topicId, topic] = Object.entries(topics)[0] as [
      string,
      { Properties: { KmsMasterKeyId: { 'Fn::GetAtt': [string, string] } } },
    ];
    const key = template.findResources('AWS::KMS::Key')[topic.Properties.KmsMasterKeyId['Fn::GetAtt'][0]] as {
      Properties: { KeyPolicy: { Statement: unknown[] } };
    };
    expect(key.Properties.KeyPolicy.Statement).toContainEqual(
      expect.objectContaining({
        Effect: 'Allow',
        Principal: { Service: 'cloudwatch.amazonaws.com' },
        Action: ['kms:Decrypt', 'kms:GenerateDataKey*'],
        Condition: fromOurAlarms,
      }),
    );
    template.hasResourceProperties('AWS::SNS::TopicPolicy', {
      Topics: [{ Ref: topicId }],
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Effect: 'Allow',
            Principal: { Service: 'cloudwatch.amazonaws.com' },
            Action: 'sns:Publish',
            Resource: { Ref: topicId },
            Condition: fromOurAlarms,
          }),
        ]),
      },
    });
  });

  it('alarms on lag (missing data breaches), dead letters, relay errors and throttles, monitor errors, pinned proxy sessions, parked and failed inbox events', () => {
    const alarms = Object.values(template.findResources('AWS::CloudWatch::Alarm')) as {
      Properties: {
        MetricName?: string;
        Namespace?: string;
        Threshold: number;
        TreatMissingData: string;
        ComparisonOperator: string;
        AlarmActions: unknown[];
        Statistic?: string;
        Dimensions?: unknown[];
      };
    }[];
    const byMetric = Object.fromEntries(
      alarms.map((a) => [
        `${a.Properties.Namespace}/${a.Properties.MetricName}/${JSON.stringify(a.Properties.Dimensions)}`,
        a.Properties,
      ]),
    );
    const find = (namespace: string, name: string) =>
      Object.entries(byMetric)
        .filter(([k]) => k.startsWith(`${namespace}/${name}/`))
        .map(([, v]) => v);
    expect(find('Outbox', 'OldestPendingAgeSeconds')[0]).toMatchObject({
      Threshold: 300,
      TreatMissingData: 'breaching',
      ComparisonOperator: 'GreaterThanThreshold',
      Statistic: 'Maximum',
    });
    expect(find('Outbox', 'DeadLetteredCount')[0]).toMatchObject({
      Threshold: 0,
      TreatMissingData: 'notBreaching',
      ComparisonOperator: 'GreaterThanThreshold',
    });
    expect(find('Outbox', 'Throttled')[0]).toMatchObject({
      Threshold: 0,
      ComparisonOperator: 'GreaterThanThreshold',
      Statistic: 'Sum',
    });
    // The relay's and the monitor's: any error. The example consumer's (OutboxConsumer): any error
    // but its wait-for-gap retries, which fail by design (Errors less InboxGapRetry, metric math).
    const errors = find('AWS/Lambda', 'Errors');
    expect(errors).toHaveLength(2);
    expect(
      errors.filter((e) => e.Threshold === 1 && e.ComparisonOperator === 'GreaterThanOrEqualToThreshold'),
    ).toHaveLength(2);
    const consumerErrors = alarms.filter((a) =>
      JSON.stringify(a.Properties).includes('"Expression":"errors - FILL(gapRetries, 0)"'),
    );
    expect(consumerErrors.map((a) => [a.Properties.Threshold, a.Properties.ComparisonOperator])).toEqual([
      [0, 'GreaterThanThreshold'],
    ]);
    expect(find('AWS/RDS', 'DatabaseConnectionsCurrentlySessionPinned')[0]).toMatchObject({ Threshold: 0 });
    // Parked inbox events: the monitor's count, and the example consumer's own metric.
    expect(find('Outbox', 'InboxParkedCount')[0]).toMatchObject({
      Threshold: 0,
      TreatMissingData: 'notBreaching',
      ComparisonOperator: 'GreaterThanThreshold',
      Statistic: 'Maximum',
      Dimensions: [{ Name: 'service', Value: 'outbox-monitor' }],
    });
    // Failed inbox events that no retry applied: the monitor's count.
    expect(find('Outbox', 'InboxFailedCount')[0]).toMatchObject({
      Threshold: 0,
      TreatMissingData: 'notBreaching',
      ComparisonOperator: 'GreaterThanThreshold',
      Statistic: 'Maximum',
      Dimensions: [{ Name: 'service', Value: 'outbox-monitor' }],
    });
    expect(find('Outbox', 'InboxParked')[0]).toMatchObject({
      Threshold: 0,
      ComparisonOperator: 'GreaterThanThreshold',
      Statistic: 'Sum',
      Dimensions: [{ Name: 'consumer', Value: 'billing' }],
    });
    for (const a of alarms)
      expect(a.Properties.AlarmActions).toEqual([{ Ref: expect.stringMatching(/AlarmTopic/) }]);
  });
});

describe('feature flags and physical names', () => {
  it('sets every feature flag CDK recommends for a new project in cdk.json', () => {
    const missing = Object.entries(CURRENTLY_RECOMMENDED_FLAGS)
      .filter(([flag, value]) => JSON.stringify(cdkContext[flag]) !== JSON.stringify(value))
      .map(([flag]) => flag);
    expect(missing).toEqual([]);
  });

  it('names nothing the same in two stacks of one account and region, and puts the region in the dashboard name', () => {
    // Bundling is skipped: names do not depend on the code.
    const app = newApp({ context: { ...cdkContext, 'aws:cdk:bundling-stacks': [] } });
    const stacks = [new OutboxDemoStack(app, 'OutboxRelayDemo'), new OutboxDemoStack(app, 'Orders')];
    // Properties that end in Name or Identifier but name nothing account-wide: the database inside
    // the instance, an inline policy of a role, the proxy's one target group ("default" by API),
    // metric names and endpoint service names.
    const notPhysical = new Set([
      'DBName',
      'PolicyName',
      'TargetGroupName',
      'MetricName',
      'ServiceName',
      'DisplayName',
    ]);
    const names = stacks.map((stack) => {
      const found = new Map<string, string>();
      for (const [id, resource] of Object.entries(Template.fromStack(stack).toJSON().Resources)) {
        const { Type, Properties = {} } = resource as { Type: string; Properties?: Record<string, unknown> };
        for (const [key, value] of Object.entries(Properties)) {
          // A value built from another resource (not a pseudo parameter) differs per stack anyway.
          const isReference = /"Fn::GetAtt"|"Ref":"(?!AWS::)/.test(JSON.stringify(value));
          if (/(Name|Identifier)$/.test(key) && !notPhysical.has(key) && !isReference) {
            found.set(`${Type} ${id}.${key}`, JSON.stringify(value));
          }
        }
      }
      return found;
    });
    const [first, second] = names as [Map<string, string>, Map<string, string>];
    expect(first.size).toBeGreaterThan(0);
    const shared = [...first]
      .filter(([key, value]) => second.get(key) === value)
      .map(([key, value]) => `${key}=${value}`);
    expect(shared).toEqual([]);
    // CloudWatch dashboards are global to the account, not regional.
    const dashboard = [...first].find(([key]) => key.startsWith('AWS::CloudWatch::Dashboard'));
    expect(dashboard?.[1]).toContain('{"Ref":"AWS::Region"}');
  });
});

describe('alarms link to their runbooks, and the outputs say how to connect', () => {
  /** The `#anchor`s docs/operations.md has, as GitHub slugs its headings. */
  const operationsAnchors = new Set(
    readFileSync(new URL('../../docs/operations.md', import.meta.url), 'utf8')
      .split('\n')
      .filter((l) => /^#{1,6} /.test(l))
      .map((l) =>
        l
          .replace(/^#+ /, '')
          .trim()
          .toLowerCase()
          .replace(/[^\p{L}\p{N}\s_-]/gu, '')
          .replace(/\s/g, '-'),
      ),
  );

  it("every alarm's description links to a section of docs/operations.md that exists", () => {
    // The relay's alarms (infra/observability.ts), not the example consumer's.
    const alarms = Object.entries(template.findResources('AWS::CloudWatch::Alarm'))
      .filter(([id]) =>
        /((?<!Consumer)Lag|DeadLetter|RelayError|RelayThrottle|MonitorError|ProxyPinnedSessions|InboxParked|InboxFailed)Alarm/.test(
          id,
        ),
      )
      .map(([, a]) => a) as { Properties: { AlarmDescription?: string } }[];
    expect(alarms).toHaveLength(8);
    const links = alarms.map((a) => {
      const description = a.Properties.AlarmDescription ?? '';
      const link = / Runbook: (https:\/\/\S+\/docs\/operations\.md)#([a-z0-9-]+)$/.exec(description);
      expect(link, description).not.toBeNull();
      return link?.[2] ?? '';
    });
    expect(links.filter((anchor) => !operationsAnchors.has(anchor))).toEqual([]);
    expect(new Set(links).size).toBeGreaterThanOrEqual(8);
    for (const anchor of RUNBOOK_ANCHORS) expect(operationsAnchors, anchor).toContain(anchor);
  });

  it('takes runbookUrl for the links, and outputs the endpoint, database, users and connect resource', () => {
    const app = newApp();
    const stack = new Stack(app, 'Existing', { env: { account: '123456789012', region: 'eu-west-1' } });
    const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
      vpcId: 'vpc-12345678',
      availabilityZones: ['eu-west-1a', 'eu-west-1b'],
      privateSubnetIds: ['subnet-11111111', 'subnet-22222222'],
    });
    const proxy = rds.DatabaseProxy.fromDatabaseProxyAttributes(stack, 'Proxy', {
      dbProxyName: 'orders-proxy',
      dbProxyArn: 'arn:aws:rds:eu-west-1:123456789012:db-proxy:prx-0123456789abcdef0',
      endpoint: 'orders-proxy.proxy-abc.eu-west-1.rds.amazonaws.com',
      securityGroups: [],
    });
    new OutboxRelay(stack, 'Outbox', {
      vpc,
      securityGroups: [ec2.SecurityGroup.fromSecurityGroupId(stack, 'Sg', 'sg-12345678')],
      database: { proxy, databaseName: 'orders' },
      relaySettings: { deadLetterPolicy: 'block' },
      runbookUrl: 'https://wiki.example.com/outbox/operations',
    });
    const t = Template.fromStack(stack);
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmDescription: Match.stringLikeRegexp(
        'Runbook: https://wiki\\.example\\.com/outbox/operations#lag$',
      ),
    });
    const outputs = t.findOutputs('*');
    const value = (suffix: string) =>
      Object.entries(outputs).find(([id]) => id.startsWith('Outbox') && id.includes(suffix))?.[1]?.Value;
    expect(value('DatabaseHost')).toBe('orders-proxy.proxy-abc.eu-west-1.rds.amazonaws.com');
    expect(value('DatabasePort')).toBe('5432');
    expect(value('DatabaseName')).toBe('orders');
    expect(value('MonitorDatabaseUser')).toBe('outbox_monitor');
    expect(value('RelayDatabaseUser')).toBe('outbox_relay');
    expect(value('StatusEnvironment')).toBe(
      'OUTBOX_MAX_RELAYS=4 OUTBOX_BACKLOG_PER_RELAY=30000 OUTBOX_ORDERING=aggregate OUTBOX_DEAD_LETTER_POLICY=block',
    );
    expect(JSON.stringify(value('DatabaseConnectResource'))).toMatch(
      /:rds-db:eu-west-1:123456789012:dbuser:prx-0123456789abcdef0\/\*/,
    );
  });
});

describe('OutboxRelay in an existing stack', () => {
  it('embeds with an imported VPC, proxy and bus', () => {
    const app = newApp();
    const stack = new Stack(app, 'Existing', { env: { account: '123456789012', region: 'eu-west-1' } });
    const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
      vpcId: 'vpc-12345678',
      availabilityZones: ['eu-west-1a', 'eu-west-1b'],
      privateSubnetIds: ['subnet-11111111', 'subnet-22222222'],
    });
    const proxy = rds.DatabaseProxy.fromDatabaseProxyAttributes(stack, 'Proxy', {
      dbProxyName: 'orders-proxy',
      dbProxyArn: 'arn:aws:rds:eu-west-1:123456789012:db-proxy:prx-0123456789abcdef0',
      endpoint: 'orders-proxy.proxy-abc.eu-west-1.rds.amazonaws.com',
      securityGroups: [],
    });
    const bus = events.EventBus.fromEventBusName(stack, 'Bus', 'orders');
    const sg = ec2.SecurityGroup.fromSecurityGroupId(stack, 'Sg', 'sg-12345678');
    const outbox = new OutboxRelay(stack, 'Outbox', {
      vpc,
      securityGroups: [sg],
      database: { proxy, databaseName: 'orders' },
      eventBus: bus,
      relayReservedConcurrency: 2,
    });
    const t = Template.fromStack(stack);
    t.hasResourceProperties('AWS::Lambda::Function', {
      Description: Match.stringLikeRegexp('^Outbox relay:'),
      ReservedConcurrentExecutions: 2,
    });
    t.resourceCountIs('AWS::Events::EventBus', 0);
    t.resourceCountIs('Custom::Trigger', 0);
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: {
        Variables: Match.objectLike({
          EVENT_BUS_NAME: 'orders',
          PGHOST: 'orders-proxy.proxy-abc.eu-west-1.rds.amazonaws.com',
          PGDATABASE: 'orders',
        }),
      },
      VpcConfig: { SubnetIds: ['subnet-11111111', 'subnet-22222222'], SecurityGroupIds: ['sg-12345678'] },
    });
    const relayPolicy = Object.entries(t.findResources('AWS::IAM::Policy')).find(([id]) =>
      id.startsWith('OutboxRelayFunction'),
    )?.[1] as {
      Properties: { PolicyDocument: { Statement: Statement[] } };
    };
    const statements = relayPolicy.Properties.PolicyDocument.Statement;
    expect(statements.map((x) => x.Action)).toEqual(['events:PutEvents', 'rds-db:connect']);
    expect(JSON.stringify(statements[0]?.Resource)).toContain('event-bus/orders');
    const dbUser = JSON.stringify(statements[1]?.Resource);
    expect(dbUser).toContain(':dbuser:');
    expect(dbUser).toContain('prx-0123456789abcdef0');
    expect(dbUser).toContain('/outbox_relay');
    expect(outbox.migrateFunction).toBeUndefined();
  });

  it('rejects invalid props with a clear message', () => {
    const stack = new Stack(newApp(), 'Bad');
    const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
      vpcId: 'vpc-1',
      availabilityZones: ['a'],
      privateSubnetIds: ['s-1'],
    });
    const proxy = rds.DatabaseProxy.fromDatabaseProxyAttributes(stack, 'Proxy', {
      dbProxyName: 'p',
      dbProxyArn: 'arn:aws:rds:r:1:db-proxy:prx-1',
      endpoint: 'e',
      securityGroups: [],
    });
    const sg = ec2.SecurityGroup.fromSecurityGroupId(stack, 'Sg', 'sg-1');
    expect(
      () => new OutboxRelay(stack, 'A', { vpc, securityGroups: [], database: { proxy, databaseName: 'db' } }),
    ).toThrow(/securityGroups/);
    expect(
      () =>
        new OutboxRelay(stack, 'B', {
          vpc,
          securityGroups: [sg],
          database: { proxy, databaseName: 'no-dash' },
        }),
    ).toThrow(/databaseName "no-dash"/);
    expect(
      () =>
        new OutboxRelay(stack, 'C', {
          vpc,
          securityGroups: [sg],
          database: { proxy, databaseName: 'db' },
          relayReservedConcurrency: 0,
        }),
    ).toThrow(/relayReservedConcurrency/);
    const adminSecret = secretsmanager.Secret.fromSecretNameV2(stack, 'Admin', 'admin');
    expect(
      () =>
        new OutboxRelay(stack, 'D', {
          vpc,
          securityGroups: [sg],
          database: { proxy, databaseName: 'db' },
          migration: { adminSecret, host: 'db.example', securityGroups: [sg] },
        }),
    ).toThrow(/migration.securityGroups must not include/);
  });
});

type RelayProps = Partial<ConstructorParameters<typeof OutboxRelay>[2]>;

/** An OutboxRelay in a stack of its own, on imported resources (a proxy, a VPC, a bus); returns it with its stack. */
function relayInStack(stackName: string, props: RelayProps) {
  const stack = new Stack(newApp(), stackName, { env: { account: '123456789012', region: 'eu-west-1' } });
  const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
    vpcId: 'vpc-1',
    availabilityZones: ['eu-west-1a'],
    privateSubnetIds: ['subnet-1'],
  });
  const proxy = rds.DatabaseProxy.fromDatabaseProxyAttributes(stack, 'Proxy', {
    dbProxyName: 'p',
    dbProxyArn: 'arn:aws:rds:eu-west-1:123456789012:db-proxy:prx-1',
    endpoint: 'p.proxy-1.eu-west-1.rds.amazonaws.com',
    securityGroups: [],
  });
  const sg = ec2.SecurityGroup.fromSecurityGroupId(stack, 'Sg', 'sg-12345678');
  const outbox = new OutboxRelay(stack, 'Outbox', {
    vpc,
    securityGroups: [sg],
    database: { proxy, databaseName: 'orders' },
    eventBus: events.EventBus.fromEventBusName(stack, 'Bus', 'orders'),
    ...props,
  });
  return { outbox, stack };
}

describe('OutboxRelay: no gap between relay invocations, and relays that scale with the backlog', () => {
  const relayWith = (props: RelayProps) => relayInStack('Scale', props);
  const warnings = (stack: Stack) =>
    Annotations.fromStack(stack)
      .findWarning('*', Match.anyValue())
      .map((w) => String(w.entry.data));
  const monitorEnvironment = (stack: Stack) =>
    (
      Object.values(
        Template.fromStack(stack).findResources('AWS::Lambda::Function', {
          Properties: { Description: Match.stringLikeRegexp('^Outbox monitor:') },
        }),
      )[0] as { Properties: { Environment: { Variables: Record<string, unknown> } } }
    ).Properties.Environment.Variables;

  it("sizes the relay's timeout so that each invocation still polls when the next one starts", () => {
    const { stack } = relayWith({ relaySchedule: scheduler.ScheduleExpression.rate(Duration.minutes(5)) });
    Template.fromStack(stack).hasResourceProperties('AWS::Lambda::Function', {
      Description: Match.stringLikeRegexp('^Outbox relay:'),
      Timeout: 330,
    });
    expect(warnings(stack).filter((w) => w.includes('relay-schedule-overlap'))).toEqual([]);
  });

  it('refuses a relay timeout that leaves a gap, and warns about a thin overlap', () => {
    expect(() => relayWith({ relayTimeout: Duration.seconds(60) })).toThrow(
      /relayTimeout 60 s leaves a gap of 8 s every 60 s.*at least 83 s/,
    );
    const { stack } = relayWith({ relayTimeout: Duration.seconds(75) });
    expect(warnings(stack).join('\n')).toMatch(/overlaps consecutive relay invocations by only 7 s/);
  });

  it('lets the monitor start up to maxRelays − 1 extra relays, and counts the connections at the peak', () => {
    const { outbox, stack } = relayWith({ backlogPerRelay: 5_000 });
    expect(outbox.maxRelays).toBe(4);
    // (4 relays + the scheduled relay's successor) × (4 PutEvents in flight + 1) + the monitor's 2.
    expect(outbox.databaseConnectionsAtPeak).toBe(27);
    expect(monitorEnvironment(stack)).toMatchObject({
      OUTBOX_RELAY_FUNCTION_NAME: { Ref: expect.stringMatching(/^OutboxRelayFunction/) },
      OUTBOX_MAX_RELAYS: '4',
      OUTBOX_BACKLOG_PER_RELAY: '5000',
      OUTBOX_SCALE_OUT_SECONDS: '50',
      OUTBOX_ORDERING: 'aggregate',
      OUTBOX_DEAD_LETTER_POLICY: 'continue',
    });
  });

  it("tells the monitor the relay's dead-letter policy, so rows held back under block are not counted", () => {
    const { stack } = relayWith({ relaySettings: { deadLetterPolicy: 'block' } });
    expect(monitorEnvironment(stack)).toMatchObject({
      OUTBOX_ORDERING: 'aggregate',
      OUTBOX_DEAD_LETTER_POLICY: 'block',
    });
  });

  it('refuses more relays than the database connection budget holds, naming the props', () => {
    expect(() => relayWith({ maxRelays: 8 })).toThrow(
      /9 relays .* × 5 connections .* \+ 2 for the monitor = 47 database connections, over databaseConnectionBudget 40/,
    );
    expect(() => relayWith({ maxRelays: 4, relayEnvironment: { OUTBOX_PUBLISH_CONCURRENCY: '16' } })).toThrow(
      /= 87 database connections, over databaseConnectionBudget 40/,
    );
    expect(relayWith({ maxRelays: 8, databaseConnectionBudget: 50 }).outbox.databaseConnectionsAtPeak).toBe(
      47,
    );
    expect(() => relayWith({ relayEnvironment: { OUTBOX_PUBLISH_CONCURRENCY: 'many' } })).toThrow(
      /relayEnvironment.OUTBOX_PUBLISH_CONCURRENCY: must be a whole number from 1 to 64/,
    );
  });

  it('keeps scale-out within the reserved concurrency, and turns it off with maxRelays 1', () => {
    expect(() => relayWith({ maxRelays: 4, relayReservedConcurrency: 4 })).toThrow(
      /maxRelays 4 needs relayReservedConcurrency of at least 5/,
    );
    expect(relayWith({ relayReservedConcurrency: 3 }).outbox.maxRelays).toBe(2);
    const off = relayWith({ maxRelays: 1 });
    expect(off.outbox.databaseConnectionsAtPeak).toBe(12);
    expect(monitorEnvironment(off.stack).OUTBOX_RELAY_FUNCTION_NAME).toBeUndefined();
    const monitorPolicy = Object.entries(
      Template.fromStack(off.stack).findResources('AWS::IAM::Policy'),
    ).find(([id]) => id.startsWith('OutboxMonitorFunction'))?.[1];
    expect(JSON.stringify(monitorPolicy)).not.toContain('lambda:InvokeFunction');
    expect(warnings(relayWith({ relayReservedConcurrency: 1 }).stack).join('\n')).toMatch(
      /relayReservedConcurrency 1 throttles each scheduled relay invocation/,
    );
  });
});

describe('typed relay and monitor settings, validated at synth', () => {
  const relayWith = (props: RelayProps) => relayInStack('Settings', props);
  const environmentOf = (stack: Stack, description: string) =>
    (
      Object.values(
        Template.fromStack(stack).findResources('AWS::Lambda::Function', {
          Properties: { Description: Match.stringLikeRegexp(`^${description}`) },
        }),
      )[0] as { Properties: { Environment: { Variables: Record<string, unknown> } } }
    ).Properties.Environment.Variables;

  it('sets each typed setting as its variable, and the monitor’s too', () => {
    const { stack } = relayWith({
      relaySettings: { batchSize: 50, ordering: 'none', dbPoolSize: 3 },
      monitorSettings: { publishedRetentionDays: 2, pruneBatchSize: 500 },
    });
    expect(environmentOf(stack, 'Outbox relay:')).toMatchObject({
      OUTBOX_BATCH_SIZE: '50',
      OUTBOX_ORDERING: 'none',
      OUTBOX_DB_POOL_SIZE: '3',
    });
    expect(environmentOf(stack, 'Outbox monitor:')).toMatchObject({
      OUTBOX_PUBLISHED_RETENTION_DAYS: '2',
      OUTBOX_PRUNE_BATCH_SIZE: '500',
    });
  });

  it.each([
    [
      { relaySettings: { batchSize: 0 } },
      /^relaySettings\.batchSize \(OUTBOX_BATCH_SIZE\): must be a whole number from 1 to 10000/,
    ],
    [
      { relaySettings: { ordering: 'fifo' as 'none' } },
      /^relaySettings\.ordering \(OUTBOX_ORDERING\): must be one of aggregate, none \(got "fifo"\)/,
    ],
    [
      { relaySettings: { batchSise: 10 } as never },
      /^relaySettings\.batchSise: is not a setting here; one of batchSize, /,
    ],
    [
      { monitorSettings: { inboxRetentionDays: 1 } },
      /^monitorSettings\.inboxRetentionDays \(OUTBOX_INBOX_RETENTION_DAYS\): must be a number from 2 to 3650 \(days\)/,
    ],
    [
      { relayEnvironment: { OUTBOX_BATCH_SZE: '10' } },
      /^relayEnvironment\.OUTBOX_BATCH_SZE: is not a setting of this function; one of OUTBOX_BATCH_SIZE, /,
    ],
    [
      { relayEnvironment: { OUTBOX_LEASE_SECONDS: '2' } },
      /^relayEnvironment\.OUTBOX_LEASE_SECONDS: must be a whole number from 5 to 3600 \(seconds\) \(got "2"\)/,
    ],
    [
      { monitorEnvironment: { OUTBOX_BATCH_SIZE: '10' } },
      /^monitorEnvironment\.OUTBOX_BATCH_SIZE: is not a setting of this function/,
    ],
  ])('refuses %o at synth, naming the setting', (props, message) => {
    let caught: unknown;
    try {
      relayWith(props);
    } catch (error) {
      caught = error;
    }
    expect(caught).toBeInstanceOf(OutboxConfigError);
    expect((caught as Error).message).toMatch(message);
  });

  it('economy mode sets the quiet period; relaySettings.idleReturnSeconds overrides it; steady sets none', () => {
    expect(environmentOf(relayWith({ relayMode: 'economy' }).stack, 'Outbox relay:')).toMatchObject({
      OUTBOX_IDLE_RETURN_SECONDS: String(ECONOMY_IDLE_RETURN_SECONDS),
    });
    expect(
      environmentOf(
        relayWith({ relayMode: 'economy', relaySettings: { idleReturnSeconds: 30 } }).stack,
        'Outbox relay:',
      ),
    ).toMatchObject({ OUTBOX_IDLE_RETURN_SECONDS: '30' });
    expect(environmentOf(relayWith({}).stack, 'Outbox relay:').OUTBOX_IDLE_RETURN_SECONDS).toBeUndefined();
  });

  it('counts the connections at the peak with OUTBOX_DB_POOL_SIZE when it is set', () => {
    // (4 relays + the successor) × 2 + the monitor's 1.
    expect(
      relayWith({ relaySettings: { dbPoolSize: 2 }, monitorSettings: { dbPoolSize: 1 } }).outbox
        .databaseConnectionsAtPeak,
    ).toBe(11);
  });
});

describe('example consumer wiring', () => {
  it('routes OrderPlaced to the billing Lambda, catches what it cannot deliver and what the handler fails on, under its own role', async () => {
    const { BillingConsumer } = await import('../../examples/billing/billing-consumer.ts');
    const stack = new Stack(newApp(), 'Consumer', { env: { account: '123456789012', region: 'eu-west-1' } });
    const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
      vpcId: 'vpc-1',
      availabilityZones: ['eu-west-1a'],
      privateSubnetIds: ['subnet-1'],
    });
    const proxy = rds.DatabaseProxy.fromDatabaseProxyAttributes(stack, 'Proxy', {
      dbProxyName: 'p',
      dbProxyArn: 'arn:aws:rds:eu-west-1:123456789012:db-proxy:prx-1',
      endpoint: 'p.proxy.eu-west-1.rds.amazonaws.com',
      securityGroups: [],
    });
    new BillingConsumer(stack, 'Billing', {
      bus: events.EventBus.fromEventBusName(stack, 'Bus', 'orders'),
      vpc,
      securityGroups: [ec2.SecurityGroup.fromSecurityGroupId(stack, 'Sg', 'sg-1')],
      proxy,
      databaseName: 'shop',
    });
    const t = Template.fromStack(stack);
    const queueId = (prefix: string) => {
      const ids = Object.keys(t.findResources('AWS::SQS::Queue')).filter((id) => id.startsWith(prefix));
      expect(ids, `one queue whose id starts with ${prefix}`).toHaveLength(1);
      return ids[0] as string;
    };
    const deliveryQueue = queueId('BillingDeadLetterQueue');
    const failedQueue = queueId('BillingFailedEventsQueue');

    // Delivery into Lambda: the rule target's retry policy, then the delivery dead-letter queue.
    t.hasResourceProperties('AWS::Events::Rule', {
      EventBusName: 'orders',
      // With the relay monitor's heartbeat (docs/observe.md#the-heartbeat), which the inbox acknowledges.
      EventPattern: {
        source: ['demo.shop', 'outbox.heartbeat'],
        'detail-type': ['OrderPlaced', 'OutboxHeartbeat'],
      },
      Targets: [
        Match.objectLike({
          RetryPolicy: { MaximumRetryAttempts: 185, MaximumEventAgeInSeconds: 86_400 },
          DeadLetterConfig: { Arn: { 'Fn::GetAtt': [deliveryQueue, 'Arn'] } },
        }),
      ],
    });
    // The handler failed: Lambda's own retries, then the on-failure destination (never dropped).
    t.hasResourceProperties('AWS::Lambda::EventInvokeConfig', {
      MaximumRetryAttempts: 2,
      MaximumEventAgeInSeconds: 21_600,
      DestinationConfig: { OnFailure: { Destination: { 'Fn::GetAtt': [failedQueue, 'Arn'] } } },
    });
    const policies = Object.values(t.findResources('AWS::IAM::Policy')) as {
      Properties: { PolicyDocument: { Statement: Statement[] } };
    }[];
    const statements = policies.flatMap((p) => p.Properties.PolicyDocument.Statement);
    expect(
      statements.some(
        (s) =>
          [s.Action].flat().includes('sqs:SendMessage') &&
          JSON.stringify(s.Resource) === JSON.stringify({ 'Fn::GetAtt': [failedQueue, 'Arn'] }),
      ),
      'the function may send to its on-failure queue',
    ).toBe(true);
    // Both queues encrypted, and each watched by an alarm.
    for (const id of [deliveryQueue, failedQueue]) {
      expect(t.toJSON().Resources[id].Properties).toMatchObject({ SqsManagedSseEnabled: true });
      t.hasResourceProperties('AWS::CloudWatch::Alarm', {
        Namespace: 'AWS/SQS',
        MetricName: 'ApproximateNumberOfMessagesVisible',
        Dimensions: [{ Name: 'QueueName', Value: { 'Fn::GetAtt': [id, 'QueueName'] } }],
        Threshold: 0,
        ComparisonOperator: 'GreaterThanThreshold',
      });
    }

    // Its own database role, through RDS Proxy with IAM, like the relay and the monitor.
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: {
        Variables: Match.objectLike({
          PGUSER: 'outbox_consumer',
          PGDATABASE: 'shop',
          PGHOST: 'p.proxy.eu-west-1.rds.amazonaws.com',
          OUTBOX_DB_IAM_AUTH: 'true',
        }),
      },
    });
    expect(
      statements.some(
        (s) =>
          [s.Action].flat().includes('rds-db:connect') &&
          JSON.stringify(s.Resource).includes('dbuser:prx-1/outbox_consumer'),
      ),
      'rds-db:connect as outbox_consumer',
    ).toBe(true);
  }, 60_000);
});

describe('OutboxRelay with a proxy of the same app', () => {
  const build = (auth: 'secrets' | 'iam') => {
    const app = newApp();
    const stack = new Stack(app, `Proxy${auth}`, { env: { account: '123456789012', region: 'eu-west-1' } });
    const vpc = new ec2.Vpc(stack, 'Vpc', { maxAzs: 2 });
    const instance = new rds.DatabaseInstance(stack, 'Db', {
      engine: rds.DatabaseInstanceEngine.postgres({ version: rds.PostgresEngineVersion.VER_17_9 }),
      vpc,
    });
    const proxy =
      auth === 'secrets'
        ? instance.addProxy('Proxy', {
            vpc,
            iamAuth: true,
            secrets: [instance.secret as secretsmanager.ISecret],
          })
        : instance.addProxy('Proxy', { vpc, defaultAuthScheme: rds.DefaultAuthScheme.IAM_AUTH });
    const sg = new ec2.SecurityGroup(stack, 'Sg', { vpc });
    new OutboxRelay(stack, 'Outbox', {
      vpc,
      securityGroups: [sg],
      database: { proxy, databaseName: 'orders' },
    });
    return Annotations.fromStack(stack).findWarning('*', Match.stringLikeRegexp('refuses the relay'));
  };

  it('warns at synth when the proxy authenticates with secrets (it would refuse the relay and the monitor)', () => {
    expect(build('secrets')).toHaveLength(1);
    expect(build('iam')).toHaveLength(0);
  });
});

/** Statements of the policies attached to the role of the function whose Description starts with `description`. */
function functionStatements(t: Template, description: string): Statement[] {
  const fn = Object.values(
    t.findResources('AWS::Lambda::Function', {
      Properties: { Description: Match.stringLikeRegexp(`^${description}`) },
    }),
  )[0] as { Properties: { Role: { 'Fn::GetAtt': [string, string] } } } | undefined;
  expect(fn, `a function described "${description}…"`).toBeDefined();
  const roleId = fn?.Properties.Role['Fn::GetAtt'][0];
  return Object.values(t.findResources('AWS::IAM::Policy'))
    .filter((p) =>
      JSON.stringify((p as { Properties: { Roles: unknown } }).Properties.Roles).includes(`"${roleId}"`),
    )
    .flatMap(
      (p) =>
        (p as { Properties: { PolicyDocument: { Statement: Statement[] } } }).Properties.PolicyDocument
          .Statement,
    );
}

/** The Environment.Variables of the function whose Description starts with `description`. */
function functionEnvironment(t: Template, description: string): Record<string, unknown> {
  const fn = Object.values(
    t.findResources('AWS::Lambda::Function', {
      Properties: { Description: Match.stringLikeRegexp(`^${description}`) },
    }),
  )[0] as { Properties: { Environment: { Variables: Record<string, unknown> } } };
  return fn.Properties.Environment.Variables;
}

describe('demo stack without a proxy (databaseAccess=direct, synthesised)', () => {
  let direct: Template;
  let directError: unknown;
  beforeAll(() => {
    // Bundling is skipped: the template's shape does not depend on the code (the rehearsal runs the
    // bundles of this shape).
    const app = newApp({
      context: { ...cdkContext, databaseAccess: 'direct', 'aws:cdk:bundling-stacks': [] },
    });
    Validations.of(app).addPlugins(new AwsSolutionsChecks(app));
    const { stack } = buildApp(app);
    try {
      app.synth();
    } catch (error) {
      directError = error;
    }
    direct = Template.fromStack(stack);
  }, 120_000);

  const instanceId = expect.stringMatching(/^Database[A-Z0-9]{8}$/);
  /** `rds-db:connect` on the instance's resource id, as `user`. */
  const onInstance = (user: string) => rdsDbUser({ 'Fn::GetAtt': [instanceId, 'DbiResourceId'] }, user);

  it('passes cdk-nag AwsSolutions, has no proxy, and seven alarms of the relay beside the consumer’s six', () => {
    expect(directError).toBeUndefined();
    direct.resourceCountIs('AWS::RDS::DBProxy', 0);
    direct.resourceCountIs('AWS::RDS::DBInstance', 1);
    direct.hasResourceProperties('AWS::RDS::DBInstance', { EnableIAMDatabaseAuthentication: true });
    direct.resourceCountIs('AWS::CloudWatch::Alarm', 13);
    expect(JSON.stringify(direct.toJSON())).not.toContain('DatabaseConnectionsCurrentlySessionPinned');
  });

  it('points every function at the instance’s endpoint, with IAM, verified TLS and a session of its own', () => {
    for (const [description, user] of [
      ['Outbox relay:', 'outbox_relay'],
      ['Outbox monitor:', 'outbox_monitor'],
    ] as const) {
      expect(functionEnvironment(direct, description)).toMatchObject({
        PGHOST: { 'Fn::GetAtt': [instanceId, 'Endpoint.Address'] },
        PGPORT: { 'Fn::GetAtt': [instanceId, 'Endpoint.Port'] },
        PGUSER: user,
        OUTBOX_DB_IAM_AUTH: 'true',
        OUTBOX_DB_POOLER: 'none',
        NODE_EXTRA_CA_CERTS: '/var/runtime/ca-cert.pem',
      });
    }
    const billing = Object.values(
      direct.findResources('AWS::Lambda::Function', {
        Properties: { Environment: { Variables: Match.objectLike({ PGUSER: 'outbox_consumer' }) } },
      }),
    ) as { Properties: { Environment: { Variables: Record<string, unknown> } } }[];
    expect(billing).toHaveLength(1);
    expect(billing[0]?.Properties.Environment.Variables).toMatchObject({
      PGHOST: { 'Fn::GetAtt': [instanceId, 'Endpoint.Address'] },
      OUTBOX_DB_POOLER: 'none',
      NODE_EXTRA_CA_CERTS: '/var/runtime/ca-cert.pem',
    });
    // The migrate function connects to the same instance with the admin secret.
    expect(functionEnvironment(direct, 'Outbox migrations:').DB_HOST).toEqual({
      'Fn::GetAtt': [instanceId, 'Endpoint.Address'],
    });
  });

  it('grants each function rds-db:connect as its own user on the instance’s resource id, and nothing wider', () => {
    expect(functionStatements(direct, 'Outbox relay:')).toEqual([
      {
        Action: 'events:PutEvents',
        Effect: 'Allow',
        Resource: { 'Fn::GetAtt': [expect.stringMatching(/^OutboxBus/), 'Arn'] },
      },
      { Action: 'rds-db:connect', Effect: 'Allow', Resource: onInstance('outbox_relay') },
    ]);
    const relayArn = { 'Fn::GetAtt': [expect.stringMatching(/^OutboxRelayFunction/), 'Arn'] };
    expect(functionStatements(direct, 'Outbox monitor:')).toEqual([
      { Action: 'rds-db:connect', Effect: 'Allow', Resource: onInstance('outbox_monitor') },
      // Scale-out: the monitor starts extra relays of the relay function, and invokes nothing else.
      {
        Action: 'lambda:InvokeFunction',
        Effect: 'Allow',
        Resource: [relayArn, { 'Fn::Join': ['', [relayArn, ':*']] }],
      },
    ]);
    const everyConnect = Object.values(direct.findResources('AWS::IAM::Policy'))
      .flatMap(
        (p) =>
          (p as { Properties: { PolicyDocument: { Statement: Statement[] } } }).Properties.PolicyDocument
            .Statement,
      )
      .filter((x) => [x.Action].flat().includes('rds-db:connect'));
    // relay, monitor, consumer: one user each, never the admin, never a wildcard.
    expect(everyConnect.map((x) => x.Resource)).toEqual(
      expect.arrayContaining(['outbox_relay', 'outbox_monitor', 'outbox_consumer'].map(onInstance)),
    );
    expect(everyConnect).toHaveLength(3);
    expect(JSON.stringify(everyConnect)).not.toMatch(/\*|outbox_admin/);
  });

  it('agrees with docs/deploying.md: the picture, the prose and the cost table count what the templates have', () => {
    const page = readFileSync(new URL('../../docs/deploying.md', import.meta.url), 'utf8');
    const deploy = page.slice(0, page.indexOf('\n## Tear down'));
    // Logical ids start with the construct's path: Outbox… for the relay's, Billing… for the consumer's.
    const alarmsUnder = (t: Template, part: string) =>
      Object.keys(t.findResources('AWS::CloudWatch::Alarm')).filter((id) => id.startsWith(part)).length;
    const counts = {
      relay: alarmsUnder(template, 'Outbox'),
      consumer: alarmsUnder(template, 'Billing'),
      directRelay: alarmsUnder(direct, 'Outbox'),
      all: Object.keys(template.findResources('AWS::CloudWatch::Alarm')).length,
      directAll: Object.keys(direct.findResources('AWS::CloudWatch::Alarm')).length,
    };
    const number = (pattern: RegExp) => {
      const found = pattern.exec(deploy)?.[1];
      const words: Record<string, number> = { five: 5, six: 6, seven: 7, eight: 8, nine: 9 };
      return found === undefined ? undefined : (words[found] ?? Number(found));
    };
    expect({
      relay: number(/CloudWatch metrics: (\d+) alarms/),
      consumer: number(/\(\+(\d+) on the consumer's queues, errors, parked events, lag and heartbeat\)/),
      directRelay: number(/the construct makes (\d+) alarms/),
      all: number(/\| CloudWatch: (\d+) alarms/),
      directAll: number(/`-c databaseAccess=direct`: (\d+) alarms/),
    }).toEqual(counts);
    expect(number(/with IAM\), (\w+) alarms/)).toBe(counts.relay);
    // Every resource that is billed by the month has its line in the cost table.
    const table = deploy.slice(deploy.indexOf('## Rough monthly cost'));
    for (const [type, line] of [
      ['AWS::RDS::DBInstance', /\| RDS db\./],
      ['AWS::RDS::DBProxy', /\| RDS Proxy/],
      ['AWS::EC2::VPCEndpoint', /\| \d+ interface endpoints/],
      ['AWS::KMS::Key', /\| KMS key/],
      ['AWS::CloudWatch::Dashboard', /dashboard/],
    ] as const) {
      expect(Object.keys(template.findResources(type)).length, type).toBeGreaterThan(0);
      expect(table, `${type} in the cost table`).toMatch(line);
    }
  });

  it('lets the relay, the monitor, the consumer and the migrate function reach the instance on 5432, and nothing else', () => {
    type Rule = { Type: string; Properties: Record<string, unknown> };
    const groupOf = (ref: unknown) => (ref as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
    const instance = Object.values(direct.findResources('AWS::RDS::DBInstance'))[0] as {
      Properties: { VPCSecurityGroups: unknown[] };
    };
    const dbSgs = instance.Properties.VPCSecurityGroups.map(groupOf);
    const intoDb = Object.values(direct.toJSON().Resources as Record<string, Rule>)
      .filter(
        (r) => r.Type === 'AWS::EC2::SecurityGroupIngress' && dbSgs.includes(groupOf(r.Properties.GroupId)),
      )
      .map((r) => ({ peer: groupOf(r.Properties.SourceSecurityGroupId), port: r.Properties.FromPort }));
    const sgsOf = (description: string) =>
      (
        Object.values(
          direct.findResources('AWS::Lambda::Function', {
            Properties: { Description: Match.stringLikeRegexp(`^${description}`) },
          }),
        )[0] as { Properties: { VpcConfig: { SecurityGroupIds: unknown[] } } }
      ).Properties.VpcConfig.SecurityGroupIds.map(groupOf);
    const consumerSg = Object.keys(direct.findResources('AWS::EC2::SecurityGroup')).find((id) =>
      id.startsWith('ConsumerSg'),
    );
    const expected = [...new Set([...sgsOf('Outbox relay:'), ...sgsOf('Outbox migrations:'), consumerSg])];
    expect(sgsOf('Outbox monitor:')).toEqual(sgsOf('Outbox relay:'));
    expect(intoDb.map((r) => r.peer).sort()).toEqual(expected.sort());
    for (const r of intoDb) expect(r.port).toBe(5432);
  });
});

describe('OutboxRelay on an existing instance or Aurora cluster, without a proxy', () => {
  // Bundling is skipped: these tests read the template only.
  const noBundling = { 'aws:cdk:bundling-stacks': [] };
  /** An OutboxRelay on an imported instance, with its migrate function; the template. */
  const onInstanceWithMigration = (
    props: Partial<ConstructorParameters<typeof OutboxRelay>[2]>,
    migration: { inboxConsumers?: string[] } = {},
  ) => {
    const { stack, vpc, sg } = existing();
    const instance = rds.DatabaseInstance.fromDatabaseInstanceAttributes(stack, 'Db', {
      instanceIdentifier: 'orders',
      instanceEndpointAddress: 'orders.abc.eu-west-1.rds.amazonaws.com',
      port: 5432,
      instanceResourceId: 'db-ABCDEFGHIJKLMNOP',
      securityGroups: [],
    });
    new OutboxRelay(stack, 'Outbox', {
      vpc,
      securityGroups: [sg],
      database: { instance, databaseName: 'orders' },
      ...props,
      migration: {
        adminSecret: secretsmanager.Secret.fromSecretNameV2(stack, 'Admin', 'admin'),
        securityGroups: [ec2.SecurityGroup.fromSecurityGroupId(stack, 'MigrateSg', 'sg-87654321')],
        ...migration,
      },
    });
    return Template.fromStack(stack);
  };

  const existing = () => {
    const app = newApp({ context: noBundling });
    const stack = new Stack(app, 'Direct', { env: { account: '123456789012', region: 'eu-west-1' } });
    const vpc = ec2.Vpc.fromVpcAttributes(stack, 'Vpc', {
      vpcId: 'vpc-12345678',
      availabilityZones: ['eu-west-1a', 'eu-west-1b'],
      privateSubnetIds: ['subnet-11111111', 'subnet-22222222'],
    });
    const sg = ec2.SecurityGroup.fromSecurityGroupId(stack, 'Sg', 'sg-12345678');
    return { stack, vpc, sg };
  };

  it.each([
    [
      'an RDS instance',
      (stack: Stack) => ({
        instance: rds.DatabaseInstance.fromDatabaseInstanceAttributes(stack, 'Db', {
          instanceIdentifier: 'orders',
          instanceEndpointAddress: 'orders.abc.eu-west-1.rds.amazonaws.com',
          port: 5432,
          instanceResourceId: 'db-ABCDEFGHIJKLMNOP',
          securityGroups: [],
        }),
      }),
      'orders.abc.eu-west-1.rds.amazonaws.com',
      'db-ABCDEFGHIJKLMNOP',
    ],
    [
      'an Aurora cluster',
      (stack: Stack) => ({
        cluster: rds.DatabaseCluster.fromDatabaseClusterAttributes(stack, 'Db', {
          clusterIdentifier: 'orders',
          clusterEndpointAddress: 'orders.cluster-abc.eu-west-1.rds.amazonaws.com',
          port: 5433,
          clusterResourceIdentifier: 'cluster-ABCDEFGHIJKLMNOP',
        }),
      }),
      'orders.cluster-abc.eu-west-1.rds.amazonaws.com',
      'cluster-ABCDEFGHIJKLMNOP',
    ],
  ])('connects to %s with IAM as its own users, on that resource id only', (_, target, host, resourceId) => {
    const { stack, vpc, sg } = existing();
    const outbox = new OutboxRelay(stack, 'Outbox', {
      vpc,
      securityGroups: [sg],
      database: { ...target(stack), databaseName: 'orders' },
    });
    const t = Template.fromStack(stack);
    const port = resourceId.startsWith('cluster-') ? '5433' : '5432';
    for (const [description, user] of [
      ['Outbox relay:', 'outbox_relay'],
      ['Outbox monitor:', 'outbox_monitor'],
    ] as const) {
      expect(functionEnvironment(t, description)).toMatchObject({
        PGHOST: host,
        PGPORT: port,
        PGUSER: user,
        OUTBOX_DB_IAM_AUTH: 'true',
        OUTBOX_DB_POOLER: 'none',
        NODE_EXTRA_CA_CERTS: '/var/runtime/ca-cert.pem',
      });
      const connect = functionStatements(t, description).filter((x) => x.Action === 'rds-db:connect');
      expect(connect).toEqual([
        {
          Action: 'rds-db:connect',
          Effect: 'Allow',
          Resource: {
            'Fn::Join': [
              '',
              [
                'arn:',
                { Ref: 'AWS::Partition' },
                `:rds-db:eu-west-1:123456789012:dbuser:${resourceId}/${user}`,
              ],
            ],
          },
        },
      ]);
    }
    // No proxy, no pinning alarm: seven alarms.
    expect(outbox.alarms.proxyPinnedSessions).toBeUndefined();
    t.resourceCountIs('AWS::CloudWatch::Alarm', 7);
    expect(outbox.databaseConnection.shape).toBe('direct');
  });

  it('defaults the migrate function’s host to the instance’s endpoint', () => {
    const { stack, vpc, sg } = existing();
    const instance = rds.DatabaseInstance.fromDatabaseInstanceAttributes(stack, 'Db', {
      instanceIdentifier: 'orders',
      instanceEndpointAddress: 'orders.abc.eu-west-1.rds.amazonaws.com',
      port: 5432,
      instanceResourceId: 'db-ABCDEFGHIJKLMNOP',
      securityGroups: [],
    });
    const migrateSg = ec2.SecurityGroup.fromSecurityGroupId(stack, 'MigrateSg', 'sg-87654321');
    new OutboxRelay(stack, 'Outbox', {
      vpc,
      securityGroups: [sg],
      database: { instance, databaseName: 'orders' },
      migration: {
        adminSecret: secretsmanager.Secret.fromSecretNameV2(stack, 'Admin', 'admin'),
        securityGroups: [migrateSg],
      },
    });
    expect(functionEnvironment(Template.fromStack(stack), 'Outbox migrations:').DB_HOST).toBe(
      'orders.abc.eu-west-1.rds.amazonaws.com',
    );
  });

  it('gives the migrate function the inbox consumers that get a role of their own, and refuses a name that cannot make one', () => {
    const relayWith = (inboxConsumers: string[]) =>
      functionEnvironment(onInstanceWithMigration({}, { inboxConsumers }), 'Outbox migrations:');
    const variables = relayWith(['billing', 'shipping']);
    expect(variables.OUTBOX_INBOX_CONSUMERS).toBe('billing,shipping');
    // What the migrate function reads from it (shared/platform/config.ts).
    const read = parseEnv(migrateConfigSchema, {
      DB_SECRET_ARN: 'arn',
      DB_HOST: 'host',
      DB_NAME: 'orders',
      OUTBOX_INBOX_CONSUMERS: variables.OUTBOX_INBOX_CONSUMERS as string,
    });
    expect(read[EnvVar.inboxConsumers]).toEqual(['billing', 'shipping']);
    // None: the function's environment is as before.
    expect(relayWith([])).not.toHaveProperty('OUTBOX_INBOX_CONSUMERS');
    for (const name of ['a,b', ' ', 'x'.repeat(60)]) {
      expect(() => relayWith([name]), name).toThrow(
        /^migration\.inboxConsumers: .* cannot name a consumer's role/,
      );
    }
  });

  it('monitorSettings.publishedRetentionDays 0 (no published history) goes to the relay and the migrate function too', () => {
    const deploy = (publishedRetentionDays: number) => {
      const template = onInstanceWithMigration({ monitorSettings: { publishedRetentionDays } });
      return {
        relay: functionEnvironment(template, 'Outbox relay:'),
        monitor: functionEnvironment(template, 'Outbox monitor:'),
        migrate: functionEnvironment(template, 'Outbox migrations:'),
      };
    };
    const none = deploy(0);
    expect(none.relay.OUTBOX_PUBLISHED_RETENTION_DAYS).toBe('0');
    expect(none.monitor.OUTBOX_PUBLISHED_RETENTION_DAYS).toBe('0');
    expect(none.migrate.OUTBOX_PUBLISHED_RETENTION_DAYS).toBe('0');
    // What each function reads from it (shared/platform/config.ts).
    const days = String(none.relay.OUTBOX_PUBLISHED_RETENTION_DAYS);
    expect(
      loadRelaySettings({ EVENT_BUS_NAME: 'b', OUTBOX_PUBLISHED_RETENTION_DAYS: days })
        .publishedRetentionDays,
    ).toBe(0);
    const migrateEnv = {
      DB_SECRET_ARN: 'arn',
      DB_HOST: 'host',
      DB_NAME: 'orders',
      OUTBOX_PUBLISHED_RETENTION_DAYS: days,
    };
    expect(parseEnv(migrateConfigSchema, migrateEnv)[EnvVar.publishedRetentionDays]).toBe(0);
    // Kept history: only the monitor has the setting.
    const kept = deploy(2);
    expect(kept.monitor.OUTBOX_PUBLISHED_RETENTION_DAYS).toBe('2');
    expect(kept.relay).not.toHaveProperty('OUTBOX_PUBLISHED_RETENTION_DAYS');
    expect(kept.migrate).not.toHaveProperty('OUTBOX_PUBLISHED_RETENTION_DAYS');
    // The relay's own settings do not take it: one setting, given once.
    expect(() =>
      relayInStack('HistoryTwice', { relaySettings: { publishedRetentionDays: 0 } as never }),
    ).toThrow(/^relaySettings\.publishedRetentionDays: is not a setting here/);
  });

  it('refuses an imported instance without instanceResourceId with an OutboxRelay error naming the prop', () => {
    const { stack, vpc, sg } = existing();
    const instance = rds.DatabaseInstance.fromDatabaseInstanceAttributes(stack, 'Db', {
      instanceIdentifier: 'orders',
      instanceEndpointAddress: 'orders.abc.eu-west-1.rds.amazonaws.com',
      port: 5432,
      securityGroups: [],
    });
    let error: unknown;
    try {
      new OutboxRelay(stack, 'Outbox', {
        vpc,
        securityGroups: [sg],
        database: { instance, databaseName: 'orders' },
      });
    } catch (e) {
      error = e;
    }
    expect(error).toBeInstanceOf(OutboxConfigError);
    expect((error as OutboxConfigError).variable).toBe('database.instance');
    expect((error as Error).message).toMatch(
      /^OutboxRelay: database\.instance: an imported instance needs instanceResourceId \(db-…, /,
    );
  });

  it('refuses none or several of proxy, instance and cluster, and a proxy with migrations but no host', () => {
    const { stack, vpc, sg } = existing();
    const instance = rds.DatabaseInstance.fromDatabaseInstanceAttributes(stack, 'Db', {
      instanceIdentifier: 'orders',
      instanceEndpointAddress: 'orders.abc.eu-west-1.rds.amazonaws.com',
      port: 5432,
      instanceResourceId: 'db-ABCDEFGHIJKLMNOP',
      securityGroups: [],
    });
    const proxy = rds.DatabaseProxy.fromDatabaseProxyAttributes(stack, 'Proxy', {
      dbProxyName: 'p',
      dbProxyArn: 'arn:aws:rds:eu-west-1:123456789012:db-proxy:prx-1',
      endpoint: 'p.proxy.eu-west-1.rds.amazonaws.com',
      securityGroups: [],
    });
    expect(
      () =>
        new OutboxRelay(stack, 'None', { vpc, securityGroups: [sg], database: { databaseName: 'orders' } }),
    ).toThrow(/exactly one of proxy, instance or cluster \(got none\)/);
    expect(
      () =>
        new OutboxRelay(stack, 'Both', {
          vpc,
          securityGroups: [sg],
          database: { proxy, instance, databaseName: 'orders' },
        }),
    ).toThrow(/exactly one of proxy, instance or cluster \(got proxy and instance\)/);
    expect(
      () =>
        new OutboxRelay(stack, 'NoHost', {
          vpc,
          securityGroups: [sg],
          database: { proxy, databaseName: 'orders' },
          migration: {
            adminSecret: secretsmanager.Secret.fromSecretNameV2(stack, 'Admin', 'admin'),
            securityGroups: [ec2.SecurityGroup.fromSecurityGroupId(stack, 'M', 'sg-87654321')],
          },
        }),
    ).toThrow(/migration.host is required with a proxy/);
  });

  it('warns at synth about an Aurora cluster of the app without IAM authentication', () => {
    const warnings = (iamAuthentication: boolean) => {
      const app = newApp({ context: noBundling });
      const stack = new Stack(app, `Aurora${iamAuthentication}`, {
        env: { account: '123456789012', region: 'eu-west-1' },
      });
      const vpc = new ec2.Vpc(stack, 'Vpc', { maxAzs: 2 });
      const cluster = new rds.DatabaseCluster(stack, 'Cluster', {
        engine: rds.DatabaseClusterEngine.auroraPostgres({
          version: rds.AuroraPostgresEngineVersion.VER_16_6,
        }),
        writer: rds.ClusterInstance.serverlessV2('Writer'),
        vpc,
        iamAuthentication,
      });
      new OutboxRelay(stack, 'Outbox', {
        vpc,
        securityGroups: [new ec2.SecurityGroup(stack, 'Sg', { vpc })],
        database: { cluster, databaseName: 'orders' },
      });
      return Annotations.fromStack(stack).findWarning(
        '*',
        Match.stringLikeRegexp('IAM database authentication on'),
      );
    };
    expect(warnings(false)).toHaveLength(1);
    expect(warnings(true)).toHaveLength(0);
  });
});

describe("the runbooks' aws commands resolve against the synthesised demo", () => {
  const page = (name: string) => readFileSync(new URL(`../../docs/${name}`, import.meta.url), 'utf8');
  const commands = [
    ...docsAwsCommands(page('operations.md')).map((c) => ({ page: 'operations.md', ...c })),
    ...docsAwsCommands(markdownSection(page('deploying.md'), '## First deploy: a checklist')).map((c) => ({
      page: 'deploying.md',
      ...c,
    })),
  ];
  /** The resource a service's name argument must name. */
  const TYPE_BY_SERVICE: Record<string, string> = {
    logs: 'AWS::Logs::LogGroup',
    lambda: 'AWS::Lambda::Function',
    scheduler: 'AWS::Scheduler::Schedule',
    sns: 'AWS::SNS::Topic',
  };
  /** Names that are the operator's own, not the deployment's: `aws ssm start-session --target` is their host in the VPC. */
  const operatorsOwn = (service: string, option: string) => service === 'ssm' && option === '--target';
  type Ref = { Ref?: string; 'Fn::GetAtt'?: [string, string] };
  /** The logical id of the resource the demo construct's output `name` (`RelayLogGroup`) refers to. */
  const outputTarget = (name: string): string | undefined => {
    const outputs = template.toJSON().Outputs as Record<string, { Value: Ref }>;
    const key = Object.keys(outputs).find((k) => new RegExp(`^Outbox${name}[0-9A-F]{8}$`).test(k));
    const value = key ? outputs[key]?.Value : undefined;
    return value?.Ref ?? value?.['Fn::GetAtt']?.[0];
  };
  const resources = () =>
    template.toJSON().Resources as Record<string, { Type: string; Properties: Record<string, unknown> }>;

  it('finds every command of the runbooks and the checklist', () => {
    expect(commands.filter((c) => c.page === 'operations.md').length).toBeGreaterThanOrEqual(10);
    expect(commands.filter((c) => c.page === 'deploying.md').length).toBeGreaterThanOrEqual(3);
  });

  it.each(commands)('$page: $text', (c) => {
    for (const { option, value } of c.names) {
      if (option === '--stack-name') {
        expect(value, 'the demo stack').toBe(demoStackName);
        continue;
      }
      if (operatorsOwn(c.service, option)) continue;
      const name = /^<([A-Za-z]+)>$/.exec(value)?.[1];
      expect(name, `${option} ${value}: a placeholder naming a stack output`).toBeDefined();
      const target = outputTarget(name as string);
      expect(target, `the demo has an output ${name}`).toBeDefined();
      expect(resources()[target as string]?.Type, `${name} names a resource for aws ${c.service}`).toBe(
        TYPE_BY_SERVICE[c.service],
      );
    }
    expect(
      c.variables.filter((v) => v !== 'AWS_REGION'),
      'shell variables the runbook does not set',
    ).toEqual([]);
  });

  it.each(['Relay', 'Monitor'])(
    'the %s outputs name one function, its own log group and the schedule that invokes it',
    (kind) => {
      const fn = outputTarget(`${kind}FunctionName`) as string;
      const all = resources();
      expect(all[fn]?.Type).toBe('AWS::Lambda::Function');
      expect((all[fn]?.Properties.LoggingConfig as { LogGroup?: Ref } | undefined)?.LogGroup).toEqual({
        Ref: outputTarget(`${kind}LogGroup`),
      });
      const schedule = all[outputTarget(`${kind}ScheduleName`) as string];
      expect((schedule?.Properties.Target as { Arn?: Ref } | undefined)?.Arn).toEqual({
        'Fn::GetAtt': [fn, 'Arn'],
      });
      expect(all[outputTarget('AlarmTopicArn') as string]?.Type).toBe('AWS::SNS::Topic');
    },
  );
});
