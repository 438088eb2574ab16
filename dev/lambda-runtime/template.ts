/**
 * Reads what the synthesised template says the functions are: each function's asset folder,
 * handler, environment, memory and timeout; the schedules' rates; the alarms' metrics. Values that
 * CloudFormation would fill in at deploy time (a proxy endpoint, a secret ARN, a bus name) are
 * resolved to the rehearsal's stand-ins; any other intrinsic is an error naming it, so a template
 * change that the rehearsal cannot follow fails loudly instead of being guessed at.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

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
}

/** The parts of a synthesised stack the rehearsal runs. */
export interface SynthesisedStack {
  functions: TemplateFunction[];
  schedules: TemplateSchedule[];
  alarms: TemplateAlarm[];
  /** ARN (as resolved) of each secret, by logical id, for the Secrets Manager stand-in. */
  secrets: Map<string, { logicalId: string; username: string | undefined }>;
  /** Names given to event buses, by logical id. */
  buses: Map<string, string>;
}

/**
 * Reads `<stackName>.template.json` from a cdk.out folder.
 * @throws naming the resource and the intrinsic the rehearsal cannot resolve
 */
export async function readStack(
  cdkOut: string,
  stackName: string,
  standIns: StandIns,
): Promise<SynthesisedStack> {
  const template = JSON.parse(await readFile(join(cdkOut, `${stackName}.template.json`), 'utf8')) as {
    Resources: Record<string, Resource>;
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
        return id;
      default:
        throw new Error(`${where}: the rehearsal has no stand-in for Ref ${id} (${resource.Type})`);
    }
  };
  const getAtt = (id: string, attribute: string, where: string): string => {
    const type = resources[id]?.Type;
    if (type === 'AWS::RDS::DBProxy' && attribute === 'Endpoint') return standIns.proxyEndpoint;
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
        const [index, list] = value['Fn::Select'] as [number, Json[]];
        return resolve(list[Number(index)] as Json, where);
      }
    }
    throw new Error(`${where}: the rehearsal cannot resolve ${JSON.stringify(value)}`);
  };

  const functions: TemplateFunction[] = [];
  const schedules: TemplateSchedule[] = [];
  const alarms: TemplateAlarm[] = [];
  for (const [logicalId, resource] of Object.entries(resources)) {
    const p = resource.Properties ?? {};
    if (resource.Type === 'AWS::Lambda::Function') {
      const asset = resource.Metadata?.['aws:asset:path'];
      if (typeof asset !== 'string') continue; // inline code (none of ours)
      const variables = ((p.Environment as { Variables?: Record<string, Json> })?.Variables ?? {}) as Record<
        string,
        Json
      >;
      const environment: Record<string, string> = {};
      for (const [name, value] of Object.entries(variables)) {
        environment[name] = resolve(value, `${logicalId}.Environment.${name}`);
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
      const target = p.Target as { Arn: { 'Fn::GetAtt': [string, string] }; Input?: string };
      schedules.push({
        logicalId,
        expression,
        periodSeconds: rate ? Number(rate[1]) * unit[rate[2] as keyof typeof unit] : Number.NaN,
        targetLogicalId: target.Arn['Fn::GetAtt'][0],
        input: target.Input ? JSON.parse(target.Input) : {},
      });
    } else if (resource.Type === 'AWS::CloudWatch::Alarm') {
      const dimensions: Record<string, string> = {};
      for (const d of (p.Dimensions ?? []) as { Name: string; Value: Json }[]) {
        dimensions[d.Name] = resolve(d.Value, `${logicalId}.Dimensions.${d.Name}`);
      }
      alarms.push({
        logicalId,
        namespace: String(p.Namespace),
        metricName: String(p.MetricName),
        dimensions,
      });
    }
  }
  return { functions, schedules, alarms, secrets, buses };
}
