/**
 * Reads what the synthesised template says the functions are: each function's asset folder,
 * handler, environment, memory and timeout; the schedules' rates; the alarms' metrics; and how
 * events reach a consumer: the rules and their targets, the queues (visibility timeout, redrive),
 * the functions' asynchronous invocation configs and their SQS event source mappings; and the
 * stack's outputs (what an operator reads to connect the CLI). Values that
 * CloudFormation would fill in at deploy time (a proxy endpoint, a secret ARN, a bus name) are
 * resolved to the rehearsal's stand-ins; any other intrinsic is an error naming it, so a template
 * change that the rehearsal cannot follow fails loudly instead of being guessed at.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

interface Resource {
  Type: string;
  Properties?: Record<string, Json>;
  Metadata?: Record<string, Json>;
}

/** Deploy-time values, by resource type, that the rehearsal stands in for. */
export interface StandIns {
  region: string;
  account: string;
  /** `Fn::GetAtt [proxy, Endpoint]`. */
  proxyEndpoint: string;
  /** `Fn::GetAtt [instance, Endpoint.Address]` and `Endpoint.Port`. */
  instanceAddress: string;
  instancePort: number;
}

/** A function as the template declares it. */
export interface TemplateFunction {
  logicalId: string;
  /** The construct path, e.g. `OutboxRelayDemo/Outbox/RelayFunction/Resource`. */
  path: string;
  assetDir: string;
  handler: string;
  runtime: string;
  memoryMb: number;
  timeoutSeconds: number;
  environment: Record<string, string>;
}

/** A schedule: its rate and the function it invokes. */
export interface TemplateSchedule {
  logicalId: string;
  expression: string;
  /** Seconds between invocations for a `rate(...)` expression. */
  periodSeconds: number;
  targetLogicalId: string;
  input: unknown;
}

/** An alarm's metric. */
export interface TemplateAlarm {
  logicalId: string;
  namespace: string;
  metricName: string;
  dimensions: Record<string, string>;
  /**
   * A metric of a metric-math alarm (one entry per metric it reads) that its expression fills with
   * a value when missing (`FILL(m, 0)`): the alarm works whether or not it is ever emitted.
   */
  optional?: boolean;
}

/** An SQS queue; the rehearsal creates it on the local SQS endpoint under `name`. */
export interface TemplateQueue {
  logicalId: string;
  /** The name its `QueueName` and ARN resolve to: `<stack>-<logicalId>`. */
  name: string;
  /** `VisibilityTimeout`, seconds (SQS's default 30). */
  visibilityTimeoutSeconds: number;
  /** `MessageRetentionPeriod`, seconds (SQS's default 4 days). */
  retentionSeconds: number;
  /** `RedrivePolicy`: where a message goes after `maxReceiveCount` receives. */
  redrive: { deadLetterLogicalId: string; maxReceiveCount: number } | undefined;
}

/** A function's `AWS::Lambda::EventInvokeConfig`: how Lambda handles its failed asynchronous invocations. */
export interface TemplateAsyncConfig {
  functionLogicalId: string;
  maximumRetryAttempts: number;
  maximumEventAgeSeconds: number;
  /** The queue of `DestinationConfig.OnFailure`, when it is one. */
  onFailureQueueLogicalId: string | undefined;
}

/** An EventBridge rule: what it matches and where it sends it. */
export interface TemplateRule {
  logicalId: string;
  /** The `EventPattern` as written (`source`, `detail-type` lists). */
  pattern: Record<string, Json>;
  targets: {
    kind: 'lambda' | 'sqs';
    /** The function or queue. */
    logicalId: string;
    /** The target's `DeadLetterConfig` queue. */
    deadLetterQueueLogicalId: string | undefined;
    retryAttempts: number | undefined;
  }[];
}

/** An `AWS::Lambda::EventSourceMapping` from an SQS queue. */
export interface TemplateEventSource {
  functionLogicalId: string;
  queueLogicalId: string;
  batchSize: number;
  reportBatchItemFailures: boolean;
}

/** An `AWS::EventsV2::Subscriber` with a Lambda target: a Custom Event Bus's delivery to a function. */
export interface TemplateSubscriber {
  logicalId: string;
  type: 'FIFO' | 'UNORDERED';
  /** Its filters' patterns by scope (`DATA`: the EventBridge event; `SYSTEM_METADATA`), each parsed. */
  filters: { scope: string; pattern: Record<string, Json> }[];
  /** The function it invokes. */
  functionLogicalId: string;
  /** `RetryPolicy` (the subscriber's defaults, 5 and 300 s, when absent). */
  maxRetryAttempts: number;
  maxEventAgeSeconds: number;
  /** The queue of `OnFailureConfiguration`, when it is one of the template's. */
  deadLetterQueueLogicalId: string | undefined;
  transformer: 'RAW' | 'WITH_METADATA';
}

/** The parts of a synthesised stack the rehearsal runs. */
export interface SynthesisedStack {
  subscribers: TemplateSubscriber[];
  /**
   * With `unresolved: 'omit'`: each value left out because it depends on what only a deployment
   * knows, as `<logical id>.Environment.<name>` (or `Outputs.<id>`, an alarm's dimension), with the intrinsic.
   */
  unresolved: string[];
  queues: TemplateQueue[];
  asyncConfigs: TemplateAsyncConfig[];
  rules: TemplateRule[];
  eventSources: TemplateEventSource[];
  functions: TemplateFunction[];
  schedules: TemplateSchedule[];
  alarms: TemplateAlarm[];
  /** ARN (as resolved) of each secret, by logical id, for the Secrets Manager stand-in. */
  secrets: Map<string, { logicalId: string; username: string | undefined }>;
  /** Names given to event buses, by logical id. */
  buses: Map<string, string>;
  /** The stack's outputs, by logical id (`OutboxDatabaseHostB6CAF0D3`), their values resolved. */
  outputs: Map<string, { value: string; description: string }>;
}

/**
 * Reads `<stackName>.template.json` from a cdk.out folder.
 * @throws naming the resource and the intrinsic the rehearsal cannot resolve
 */
export async function readStack(
  cdkOut: string,
  stackName: string,
  standIns: StandIns,
  options: {
    /**
     * `throw` (default): a value the reader cannot resolve is an error. `omit`: it is left out and
     * named in `unresolved` (the local delivery reads a user's stack, whose other resources it has
     * no stand-ins for).
     */
    unresolved?: 'throw' | 'omit';
    /** The template's file in `cdkOut`; default `<stackName>.template.json`. */
    templateFile?: string;
  } = {},
): Promise<SynthesisedStack> {
  const unresolved: string[] = [];
  /** `value()`, or, with `unresolved: 'omit'`, undefined when it cannot be resolved (named in `unresolved`). */
  const lenient = <T>(where: string, value: () => T): T | undefined => {
    if (options.unresolved !== 'omit') return value();
    try {
      return value();
    } catch (error) {
      unresolved.push(`${where} (${(error as Error).message.replace(/^[^:]*: /, '')})`);
      return undefined;
    }
  };
  const template = JSON.parse(
    await readFile(join(cdkOut, options.templateFile ?? `${stackName}.template.json`), 'utf8'),
  ) as {
    Resources: Record<string, Resource>;
    Outputs?: Record<string, { Value: Json; Description?: string }>;
  };
  const resources = template.Resources;
  const secrets = new Map<string, { logicalId: string; username: string | undefined }>();
  const buses = new Map<string, string>();

  const secretArn = (id: string) =>
    `arn:aws:secretsmanager:${standIns.region}:${standIns.account}:secret:${stackName}-${id}`;
  const ref = (id: string, where: string): string => {
    if (id === 'AWS::Region') return standIns.region;
    if (id === 'AWS::AccountId') return standIns.account;
    if (id === 'AWS::Partition') return 'aws';
    if (id === 'AWS::URLSuffix') return 'amazonaws.com';
    if (id === 'AWS::StackName') return stackName;
    const resource = resources[id];
    if (!resource) throw new Error(`${where}: Ref to unknown resource ${id}`);
    switch (resource.Type) {
      case 'AWS::Events::EventBus': {
        const name = String(resource.Properties?.Name ?? `${stackName}-${id}`);
        buses.set(id, name);
        return name;
      }
      case 'AWS::SecretsManager::Secret':
      case 'AWS::SecretsManager::SecretTargetAttachment': {
        // A target attachment's Ref is the secret's ARN.
        const secretId =
          resource.Type === 'AWS::SecretsManager::Secret'
            ? id
            : String((resource.Properties?.SecretId as { Ref?: string })?.Ref ?? id);
        const template = (
          resources[secretId]?.Properties?.GenerateSecretString as { SecretStringTemplate?: string }
        )?.SecretStringTemplate;
        const username = template ? (JSON.parse(template) as { username?: string }).username : undefined;
        const arn = secretArn(secretId);
        secrets.set(arn, { logicalId: secretId, username });
        return arn;
      }
      case 'AWS::Lambda::Function':
      case 'AWS::RDS::DBProxy':
      case 'AWS::SQS::Queue':
      case 'AWS::SNS::Topic':
      case 'AWS::Lambda::Version':
      case 'AWS::Logs::LogGroup':
      case 'AWS::Scheduler::Schedule':
        return id;
      default:
        throw new Error(`${where}: the rehearsal has no stand-in for Ref ${id} (${resource.Type})`);
    }
  };
  const getAtt = (id: string, attribute: string, where: string): string => {
    const type = resources[id]?.Type;
    if (type === 'AWS::RDS::DBProxy' && attribute === 'Endpoint') return standIns.proxyEndpoint;
    if (type === 'AWS::RDS::DBProxy' && attribute === 'DBProxyArn')
      return `arn:aws:rds:${standIns.region}:${standIns.account}:db-proxy:prx-0123456789abcdef0`;
    if (type === 'AWS::RDS::DBInstance' && attribute === 'DbiResourceId') return 'db-REHEARSAL0123456789';
    if (type === 'AWS::RDS::DBInstance' && attribute === 'Endpoint.Address') return standIns.instanceAddress;
    if (type === 'AWS::RDS::DBInstance' && attribute === 'Endpoint.Port')
      return String(standIns.instancePort);
    if (type === 'AWS::Lambda::Function' && attribute === 'Arn')
      return `arn:aws:lambda:${standIns.region}:${standIns.account}:function:${id}`;
    if (type === 'AWS::SQS::Queue' && attribute === 'QueueName') return `${stackName}-${id}`;
    if (type === 'AWS::SQS::Queue' && attribute === 'Arn')
      return `arn:aws:sqs:${standIns.region}:${standIns.account}:${stackName}-${id}`;
    if (type === 'AWS::Events::EventBus' && attribute === 'Name') return ref(id, where);
    if (type === 'AWS::Events::EventBus' && attribute === 'Arn')
      return `arn:aws:events:${standIns.region}:${standIns.account}:event-bus/${ref(id, where)}`;
    throw new Error(`${where}: the rehearsal has no stand-in for Fn::GetAtt ${id}.${attribute} (${type})`);
  };
  const resolve = (value: Json, where: string): string => {
    if (typeof value === 'string') return value;
    if (typeof value === 'number' || typeof value === 'boolean') return String(value);
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      if ('Ref' in value) return ref(String(value.Ref), where);
      if ('Fn::GetAtt' in value) {
        const [id, attribute] = value['Fn::GetAtt'] as [string, string];
        return getAtt(id, attribute, where);
      }
      if ('Fn::Join' in value) {
        const [separator, parts] = value['Fn::Join'] as [string, Json[]];
        return parts.map((p) => resolve(p, where)).join(separator);
      }
      if ('Fn::Select' in value) {
        const [index, list] = value['Fn::Select'] as [number, Json];
        if (list && typeof list === 'object' && !Array.isArray(list) && 'Fn::Split' in list) {
          const [separator, whole] = list['Fn::Split'] as [string, Json];
          return resolve(whole, where).split(separator)[Number(index)] ?? '';
        }
        return resolve((list as Json[])[Number(index)] as Json, where);
      }
    }
    throw new Error(`${where}: the rehearsal cannot resolve ${JSON.stringify(value)}`);
  };

  /** The resource a `Ref` or `Fn::GetAtt` (an ARN, a name) points at. */
  const target = (value: Json | undefined, where: string): string => {
    if (value && typeof value === 'object' && !Array.isArray(value)) {
      if ('Ref' in value) return String(value.Ref);
      if ('Fn::GetAtt' in value) return String((value['Fn::GetAtt'] as Json[])[0]);
    }
    throw new Error(`${where}: expected a Ref or Fn::GetAtt of a resource, got ${JSON.stringify(value)}`);
  };

  const queues: TemplateQueue[] = [];
  const asyncConfigs: TemplateAsyncConfig[] = [];
  const rules: TemplateRule[] = [];
  const eventSources: TemplateEventSource[] = [];
  const functions: TemplateFunction[] = [];
  const schedules: TemplateSchedule[] = [];
  const alarms: TemplateAlarm[] = [];
  const subscribers: TemplateSubscriber[] = [];
  for (const [logicalId, resource] of Object.entries(resources)) {
    const p = resource.Properties ?? {};
    if (resource.Type === 'AWS::Lambda::Function') {
      // The asset's folder: its metadata when synthesised by the cdk CLI, else (an app run with
      // node, which leaves asset metadata out) the folder named after the S3 key's hash.
      const key = (p.Code as { S3Key?: Json } | undefined)?.S3Key;
      const asset =
        resource.Metadata?.['aws:asset:path'] ??
        (typeof key === 'string' && /^[0-9a-f]{64}\.zip$/.test(key)
          ? `asset.${key.slice(0, -4)}`
          : undefined);
      if (typeof asset !== 'string') continue; // inline code (none of ours)
      const variables = ((p.Environment as { Variables?: Record<string, Json> })?.Variables ?? {}) as Record<
        string,
        Json
      >;
      const environment: Record<string, string> = {};
      for (const [name, value] of Object.entries(variables)) {
        const where = `${logicalId}.Environment.${name}`;
        const resolved = lenient(where, () => resolve(value, where));
        if (resolved !== undefined) environment[name] = resolved;
      }
      functions.push({
        logicalId,
        path: String(resource.Metadata?.['aws:cdk:path'] ?? logicalId),
        assetDir: join(cdkOut, asset),
        handler: String(p.Handler),
        runtime: String(p.Runtime),
        memoryMb: Number(p.MemorySize ?? 128),
        timeoutSeconds: Number(p.Timeout ?? 3),
        environment,
      });
    } else if (resource.Type === 'AWS::Scheduler::Schedule') {
      const expression = String(p.ScheduleExpression);
      const rate = /^rate\((\d+) (minute|minutes|hour|hours|day|days)\)$/.exec(expression);
      const unit = { minute: 60, minutes: 60, hour: 3600, hours: 3600, day: 86_400, days: 86_400 };
      const target = p.Target as { Arn?: { 'Fn::GetAtt'?: [string, string] }; Input?: string };
      schedules.push({
        logicalId,
        expression,
        periodSeconds: rate ? Number(rate[1]) * unit[rate[2] as keyof typeof unit] : Number.NaN,
        targetLogicalId: target.Arn?.['Fn::GetAtt']?.[0] ?? '',
        input: target.Input ? JSON.parse(target.Input) : {},
      });
    } else if (resource.Type === 'AWS::SQS::Queue') {
      const redrive = p.RedrivePolicy as { deadLetterTargetArn?: Json; maxReceiveCount?: Json } | undefined;
      queues.push({
        logicalId,
        name: `${stackName}-${logicalId}`,
        visibilityTimeoutSeconds: Number(p.VisibilityTimeout ?? 30),
        retentionSeconds: Number(p.MessageRetentionPeriod ?? 345_600),
        redrive: redrive
          ? {
              deadLetterLogicalId:
                lenient(`${logicalId}.RedrivePolicy`, () =>
                  target(redrive.deadLetterTargetArn, `${logicalId}.RedrivePolicy`),
                ) ?? '',
              maxReceiveCount: Number(redrive.maxReceiveCount),
            }
          : undefined,
      });
    } else if (resource.Type === 'AWS::Lambda::EventInvokeConfig') {
      const onFailure = (p.DestinationConfig as { OnFailure?: { Destination?: Json } } | undefined)?.OnFailure
        ?.Destination;
      const destination =
        onFailure === undefined
          ? undefined
          : lenient(logicalId, () => target(onFailure, `${logicalId}.OnFailure`));
      const fn = lenient(logicalId, () => target(p.FunctionName, `${logicalId}.FunctionName`));
      if (fn === undefined) continue;
      asyncConfigs.push({
        functionLogicalId: fn,
        maximumRetryAttempts: Number(p.MaximumRetryAttempts ?? 2),
        maximumEventAgeSeconds: Number(p.MaximumEventAgeInSeconds ?? 21_600),
        onFailureQueueLogicalId:
          destination && resources[destination]?.Type === 'AWS::SQS::Queue' ? destination : undefined,
      });
    } else if (resource.Type === 'AWS::Events::Rule') {
      rules.push({
        logicalId,
        pattern: (p.EventPattern ?? {}) as Record<string, Json>,
        targets: (
          (p.Targets ?? []) as {
            Arn: Json;
            DeadLetterConfig?: { Arn: Json };
            RetryPolicy?: { MaximumRetryAttempts?: Json };
          }[]
        ).flatMap((t, i) => {
          const id = lenient(`${logicalId}.Targets[${i}]`, () => target(t.Arn, `${logicalId}.Targets[${i}]`));
          if (id === undefined) return [];
          const type = resources[id]?.Type;
          if (type !== 'AWS::Lambda::Function' && type !== 'AWS::SQS::Queue') return [];
          return [
            {
              kind: type === 'AWS::Lambda::Function' ? ('lambda' as const) : ('sqs' as const),
              logicalId: id,
              deadLetterQueueLogicalId: t.DeadLetterConfig
                ? target(t.DeadLetterConfig.Arn, `${logicalId}.Targets[${i}].DeadLetterConfig`)
                : undefined,
              retryAttempts:
                t.RetryPolicy?.MaximumRetryAttempts === undefined
                  ? undefined
                  : Number(t.RetryPolicy.MaximumRetryAttempts),
            },
          ];
        }),
      });
    } else if (resource.Type === 'AWS::Lambda::EventSourceMapping') {
      const source = lenient(logicalId, () => target(p.EventSourceArn, `${logicalId}.EventSourceArn`));
      const fn = lenient(logicalId, () => target(p.FunctionName, `${logicalId}.FunctionName`));
      if (source === undefined || fn === undefined || resources[source]?.Type !== 'AWS::SQS::Queue') continue;
      eventSources.push({
        functionLogicalId: fn,
        queueLogicalId: source,
        batchSize: Number(p.BatchSize ?? 10),
        reportBatchItemFailures: ((p.FunctionResponseTypes ?? []) as Json[]).includes(
          'ReportBatchItemFailures',
        ),
      });
    } else if (resource.Type === 'AWS::EventsV2::Subscriber') {
      const invoke = (p.InvokeConfiguration ?? {}) as { TargetArn?: Json };
      const fn = lenient(`${logicalId}.InvokeConfiguration`, () =>
        target(invoke.TargetArn, `${logicalId}.InvokeConfiguration.TargetArn`),
      );
      if (fn === undefined || resources[fn]?.Type !== 'AWS::Lambda::Function') continue;
      const retry = (p.RetryPolicy ?? {}) as { MaxRetryAttempts?: Json; MaxEventAgeInSeconds?: Json };
      const onFailure = (p.OnFailureConfiguration as { Arn?: Json } | undefined)?.Arn;
      const dlq =
        onFailure === undefined
          ? undefined
          : lenient(`${logicalId}.OnFailure`, () => target(onFailure, logicalId));
      const filters = ((p.FilterConfiguration as { Filters?: { Scope: string; Pattern: string }[] })
        ?.Filters ?? []) as { Scope: string; Pattern: string }[];
      subscribers.push({
        logicalId,
        type: p.Type === 'UNORDERED' ? 'UNORDERED' : 'FIFO',
        filters: filters.map((f) => ({
          scope: f.Scope,
          pattern: JSON.parse(f.Pattern) as Record<string, Json>,
        })),
        functionLogicalId: fn,
        maxRetryAttempts: Number(retry.MaxRetryAttempts ?? 5),
        maxEventAgeSeconds: Number(retry.MaxEventAgeInSeconds ?? 300),
        deadLetterQueueLogicalId: dlq && resources[dlq]?.Type === 'AWS::SQS::Queue' ? dlq : undefined,
        transformer:
          (p.Transformer as { Type?: string } | undefined)?.Type === 'WITH_METADATA'
            ? 'WITH_METADATA'
            : 'RAW',
      });
    } else if (resource.Type === 'AWS::CloudWatch::Alarm') {
      type Stat = { Namespace?: Json; MetricName?: Json; Dimensions?: Json };
      const read = (m: Stat, optional: boolean) => {
        const dimensions: Record<string, string> = {};
        for (const d of (m.Dimensions ?? []) as { Name: string; Value: Json }[]) {
          const where = `${logicalId}.Dimensions.${d.Name}`;
          const resolved = lenient(where, () => resolve(d.Value, where));
          if (resolved !== undefined) dimensions[d.Name] = resolved;
        }
        alarms.push({
          logicalId,
          namespace: String(m.Namespace),
          metricName: String(m.MetricName),
          dimensions,
          ...(optional ? { optional } : {}),
        });
      };
      // A metric-math alarm: each metric it reads, those its expressions FILL optional.
      const math = (p.Metrics ?? []) as { Id: string; Expression?: string; MetricStat?: { Metric: Stat } }[];
      const expressions = math.map((m) => m.Expression ?? '').join(' ');
      for (const m of math) {
        if (m.MetricStat) read(m.MetricStat.Metric, expressions.includes(`FILL(${m.Id}`));
      }
      if (math.length === 0) read(p as Stat, false);
    }
  }
  const outputs = new Map<string, { value: string; description: string }>();
  for (const [logicalId, output] of Object.entries(template.Outputs ?? {})) {
    const value = lenient(`Outputs.${logicalId}`, () => resolve(output.Value, `Outputs.${logicalId}`));
    if (value !== undefined) outputs.set(logicalId, { value, description: output.Description ?? '' });
  }
  return {
    functions,
    schedules,
    alarms,
    secrets,
    buses,
    queues,
    asyncConfigs,
    rules,
    eventSources,
    subscribers,
    outputs,
    unresolved,
  };
}
