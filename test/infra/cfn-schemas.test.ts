/**
 * The registry schemas of `AWS::EventsV2::*` (test/infra/cfn-schemas/, README.md there), which let
 * cfn-lint lint the demo's `-c bus=custom` template: they are well-formed, the demo's template
 * passes them, and they fail a template that is wrong (a misspelt Subscriber property, a
 * RetryPolicy out of range, an attribute the type does not have). With cfn-lint installed, through
 * `.ci/cfn-lint` exactly as `.ci/run` runs it; without, the same template against the schemas here.
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { App } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApp } from '../../examples/demo/app.ts';

// biome-ignore lint/suspicious/noExplicitAny: a JSON schema and a template are untyped JSON
type Json = any;

const schemaDir = fileURLToPath(new URL('./cfn-schemas/', import.meta.url));
const cfnLint = fileURLToPath(new URL('../../.ci/cfn-lint', import.meta.url));
const schemaFiles = readdirSync(schemaDir).filter((f) => f.endsWith('.json'));
const schemas: Record<string, Json> = Object.fromEntries(
  schemaFiles.map((f) => {
    const schema = JSON.parse(readFileSync(join(schemaDir, f), 'utf8'));
    return [schema.typeName, schema];
  }),
);
const cfnLintInstalled = spawnSync('cfn-lint', ['--version']).status === 0;
const by = cfnLintInstalled ? 'cfn-lint with the schemas' : 'the schemas (cfn-lint is not installed)';

const workRoot = mkdtempSync(join(tmpdir(), 'outbox-cfn-schemas-test-'));
afterAll(() => rmSync(workRoot, { recursive: true, force: true }));

/** cdk.json's context (the feature flags), as `cdk synth` passes it. */
const cdkContext = JSON.parse(readFileSync(new URL('../../cdk.json', import.meta.url), 'utf8')).context;

/** The schema a `#/definitions/…` reference names, or undefined. */
function at(schema: Json, ref: string): Json {
  return ref
    .replace(/^#\//, '')
    .split('/')
    .reduce((node, key) => node?.[key], schema);
}

/** The schema of the property a `/properties/A/B` pointer names (through references), or undefined. */
function property(schema: Json, pointer: string): Json {
  const [, first, ...path] = pointer.split('/');
  if (first !== 'properties') return undefined;
  const deref = (node: Json) => (node?.$ref ? at(schema, node.$ref) : node);
  return path.reduce((node, key) => deref(deref(node)?.properties?.[key]), schema);
}

/** An intrinsic function or a Ref: its value is only known at deployment, so no check applies. */
function isIntrinsic(value: Json): boolean {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return false;
  const keys = Object.keys(value);
  const [key] = keys;
  return keys.length === 1 && key !== undefined && (key === 'Ref' || key.startsWith('Fn::'));
}

/**
 * What a value breaks of a schema, one `path: reason` a finding: the keywords these schemas use
 * (type, enum, lengths, ranges, pattern, required, properties, patternProperties,
 * additionalProperties, item counts), intrinsic functions passing as cfn-lint lets them.
 */
function violations(root: Json, schema: Json, value: Json, path: string): string[] {
  if (schema.$ref) return violations(root, at(root, schema.$ref), value, path);
  if (isIntrinsic(value)) return [];
  const out: string[] = [];
  // A resource schema's root is an object without saying so.
  const type = schema.type ?? (schema.properties ? 'object' : undefined);
  if (type === 'string') {
    if (typeof value !== 'string') return [`${path}: not a string`];
    if (schema.enum && !schema.enum.includes(value))
      out.push(`${path}: ${value} is not one of ${schema.enum}`);
    if (schema.minLength !== undefined && value.length < schema.minLength) out.push(`${path}: too short`);
    if (schema.maxLength !== undefined && value.length > schema.maxLength) out.push(`${path}: too long`);
    if (schema.pattern && !new RegExp(schema.pattern).test(value)) out.push(`${path}: does not match`);
  } else if (type === 'integer') {
    if (!Number.isInteger(value)) return [`${path}: not an integer`];
    if (schema.minimum !== undefined && value < schema.minimum) out.push(`${path}: below ${schema.minimum}`);
    if (schema.maximum !== undefined && value > schema.maximum) out.push(`${path}: above ${schema.maximum}`);
  } else if (type === 'array') {
    if (!Array.isArray(value)) return [`${path}: not an array`];
    if (schema.minItems !== undefined && value.length < schema.minItems) out.push(`${path}: too few items`);
    if (schema.maxItems !== undefined && value.length > schema.maxItems) out.push(`${path}: too many items`);
    value.forEach((item, i) => {
      out.push(...violations(root, schema.items, item, `${path}/${i}`));
    });
  } else if (type === 'object') {
    if (value === null || typeof value !== 'object' || Array.isArray(value))
      return [`${path}: not an object`];
    for (const key of schema.required ?? []) if (!(key in value)) out.push(`${path}/${key}: required`);
    const keys = Object.keys(value);
    if (schema.maxProperties !== undefined && keys.length > schema.maxProperties)
      out.push(`${path}: too many`);
    for (const key of keys) {
      const patterned = Object.entries(schema.patternProperties ?? {}).find(([p]) => new RegExp(p).test(key));
      const sub =
        schema.properties?.[key] ??
        patterned?.[1] ??
        (typeof schema.additionalProperties === 'object' ? schema.additionalProperties : undefined);
      if (sub) out.push(...violations(root, sub, value[key], `${path}/${key}`));
      else if (schema.additionalProperties === false) out.push(`${path}/${key}: not allowed`);
    }
  }
  return out;
}

/** Every sub-schema of a schema, with where it is (for the messages). */
function* subSchemas(schema: Json, path = ''): Generator<[string, Json]> {
  if (schema === null || typeof schema !== 'object') return;
  yield [path, schema];
  for (const [key, child] of Object.entries(schema)) {
    if (key === 'enum' || key === 'required') continue;
    if (child && typeof child === 'object') yield* subSchemas(child, `${path}/${key}`);
  }
}

/** The logical ids of a template's resources of one type. */
const idsOf = (template: Json, type: string) =>
  Object.keys(template.Resources).filter((id) => template.Resources[id].Type === type);

type Finding = {
  Level: string;
  Rule: { Id: string };
  Location: { Path: (string | number)[] };
  Message: string;
};

let template: Json;
let broken: Json;
let subscriberId: string;
/** cfn-lint's errors by file, when it is installed. */
let linted: { clean: Finding[]; broken: Finding[] } | undefined;

beforeAll(() => {
  // The demo's custom-bus shape, as `cdk synth -c bus=custom` builds it (bundling skipped: the code
  // is not in the template).
  const app = new App({
    outdir: mkdtempSync(join(workRoot, 'cdk.out-')),
    context: { ...cdkContext, bus: 'custom', 'aws:cdk:bundling-stacks': [] },
  });
  const { stack } = buildApp(app);
  template = Template.fromStack(stack).toJSON();
  const subscribers = idsOf(template, 'AWS::EventsV2::Subscriber');
  expect(subscribers).toHaveLength(1);
  subscriberId = subscribers[0] as string;

  // A copy with a misspelt Subscriber property, a RetryPolicy out of range both ways, and an output
  // taking an attribute a Subscriber does not have.
  broken = structuredClone(template);
  const props = broken.Resources[subscriberId].Properties;
  props.FilterConfiguraton = props.FilterConfiguration;
  delete props.FilterConfiguration;
  props.RetryPolicy = { MaxRetryAttempts: 186, MaxEventAgeInSeconds: 59 };
  broken.Outputs = {
    ...broken.Outputs,
    SubscriberArnTypo: { Value: { 'Fn::GetAtt': [subscriberId, 'Arn'] } },
  };

  if (cfnLintInstalled) {
    const clean = join(workRoot, 'clean.template.json');
    const wrong = join(workRoot, 'broken.template.json');
    writeFileSync(clean, JSON.stringify(template, null, 1));
    writeFileSync(wrong, JSON.stringify(broken, null, 1));
    // The flags of .ci/run: an error fails the run (exit 2), the generated W3005 is ignored.
    const flags = ['--non-zero-exit-code', 'error', '--ignore-checks', 'W3005', '--format', 'json'];
    const run = spawnSync('bash', [cfnLint, ...flags, '--registry-schemas', schemaDir, '--', clean, wrong], {
      encoding: 'utf8',
    });
    expect(run.status, run.stderr).toBe(2);
    expect(run.stderr).toBe('');
    const findings = (JSON.parse(run.stdout) as (Finding & { Filename: string })[]).filter(
      (f) => f.Level === 'Error',
    );
    linted = {
      clean: findings.filter((f) => f.Filename === clean),
      broken: findings.filter((f) => f.Filename === wrong),
    };
  }
}, 120_000);

describe('the AWS::EventsV2 registry schemas', () => {
  it('are resource schemas of the three types the constructs create', () => {
    expect(Object.keys(schemas).sort()).toEqual([
      'AWS::EventsV2::EventBus',
      'AWS::EventsV2::ResourcePolicy',
      'AWS::EventsV2::Subscriber',
    ]);
    const synthesised = new Set(
      Object.values(template.Resources as Record<string, { Type: string }>)
        .map((r) => r.Type)
        .filter((t) => t.startsWith('AWS::EventsV2::')),
    );
    expect([...synthesised].sort()).toEqual(Object.keys(schemas).sort());
  });

  it('resolve every reference, pointer and pattern, and close every object', () => {
    for (const [typeName, schema] of Object.entries(schemas)) {
      expect(schema.sourceUrl, typeName).toMatch(
        /^https:\/\/docs\.aws\.amazon\.com\/AWSCloudFormation\/latest\/TemplateReference\/aws-resource-eventsv2-/,
      );
      expect(schema.additionalProperties, typeName).toBe(false);
      for (const key of schema.required)
        expect(schema.properties, `${typeName} required ${key}`).toHaveProperty(key);
      for (const list of [
        'readOnlyProperties',
        'primaryIdentifier',
        'createOnlyProperties',
        'writeOnlyProperties',
      ]) {
        for (const pointer of schema[list] ?? [])
          expect(property(schema, pointer), `${typeName} ${pointer}`).toBeDefined();
      }
      // The primary identifier is the service's (read-only), or one the template must give.
      for (const pointer of schema.primaryIdentifier) {
        const known =
          schema.readOnlyProperties.includes(pointer) || schema.required.includes(pointer.split('/').pop());
        expect(known, `${typeName} ${pointer}`).toBe(true);
      }
      const referenced = new Set<string>();
      for (const [where, sub] of subSchemas(schema)) {
        if (sub.$ref) {
          expect(at(schema, sub.$ref), `${typeName}${where} ${sub.$ref}`).toBeDefined();
          referenced.add(sub.$ref);
        }
        if (sub.type === 'object' && sub.properties) {
          expect(sub.additionalProperties, `${typeName}${where}`).toBe(false);
        }
        if (typeof sub.pattern === 'string')
          expect(() => new RegExp(sub.pattern), `${typeName}${where}`).not.toThrow();
        for (const p of Object.keys(sub.patternProperties ?? {})) expect(() => new RegExp(p)).not.toThrow();
      }
      // Every property type is reachable from the resource's properties.
      for (const name of Object.keys(schema.definitions ?? {})) {
        expect(referenced, `${typeName} #/definitions/${name}`).toContain(`#/definitions/${name}`);
      }
    }
  });

  it('declare as read-only every attribute the template takes with Fn::GetAtt', () => {
    const taken = JSON.stringify(template).matchAll(/"Fn::GetAtt":\["([^"]+)","([^"]+)"\]/g);
    const attributes: [string, string][] = [...taken].flatMap(([, id = '', attribute = '']) => {
      const type: string | undefined = template.Resources[id]?.Type;
      return type && schemas[type] ? [[type, attribute] as [string, string]] : [];
    });
    expect(attributes).toContainEqual(['AWS::EventsV2::EventBus', 'EventBusArn']);
    expect(attributes).toContainEqual(['AWS::EventsV2::Subscriber', 'SubscriberArn']);
    for (const [type, attribute] of attributes) {
      expect(schemas[type].readOnlyProperties, `${type}.${attribute}`).toContain(`/properties/${attribute}`);
    }
  });

  it(`pass the demo's custom-bus template: ${by}`, () => {
    if (linted) {
      expect(linted.clean.map((f) => `${f.Rule.Id} ${f.Location.Path.join('/')}: ${f.Message}`)).toEqual([]);
    }
    for (const type of Object.keys(schemas)) {
      for (const id of idsOf(template, type)) {
        expect(violations(schemas[type], schemas[type], template.Resources[id].Properties, id)).toEqual([]);
      }
    }
  });

  it(`fail a misspelt Subscriber property, a RetryPolicy out of range and an unknown attribute: ${by}`, () => {
    const prop = (...path: string[]) => ['Resources', subscriberId, 'Properties', ...path].join('/');
    if (linted) {
      const found = linted.broken.map((f) => `${f.Rule.Id} ${f.Location.Path.join('/')}`).sort();
      expect(found).toEqual(
        [
          `E3002 ${prop('FilterConfiguraton')}`,
          `E3034 ${prop('RetryPolicy', 'MaxEventAgeInSeconds')}`,
          `E3034 ${prop('RetryPolicy', 'MaxRetryAttempts')}`,
          'E6101 Outputs/SubscriberArnTypo/Value/Fn::GetAtt/1',
        ].sort(),
      );
      expect(linted.broken.find((f) => f.Rule.Id === 'E3002')?.Message).toContain("'FilterConfiguraton'");
    }
    const schema = schemas['AWS::EventsV2::Subscriber'];
    expect(
      violations(schema, schema, broken.Resources[subscriberId].Properties, subscriberId).sort(),
    ).toEqual(
      [
        `${subscriberId}/FilterConfiguraton: not allowed`,
        `${subscriberId}/RetryPolicy/MaxRetryAttempts: above 185`,
        `${subscriberId}/RetryPolicy/MaxEventAgeInSeconds: below 60`,
      ].sort(),
    );
    expect(schema.readOnlyProperties).not.toContain('/properties/Arn');
  });
});
