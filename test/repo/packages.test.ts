/**
 * Packages by role (issue 21): what each package's entry points load, read from the import graph
 * esbuild resolves from each package's folder (its manifest beside its code), and the example consumer's Lambda bundle against its bound. The installed tarballs are
 * checked by test/repo/package.test.ts; `npm run footprint` prints the install sizes and import times.
 */
import { readFile } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { describe, expect, it } from 'vitest';
import { bundleSize, CONSUMER_EXAMPLES } from '../../scripts/measure.ts';
import { PEERS } from '../../scripts/peer-matrix.ts';

const root = fileURLToPath(new URL('../..', import.meta.url));

/**
 * Issue 21's bound on the example consumer's bundle: esbuild, minified, ≤ 410 KB (400 KB until the
 * Custom Event Bus's array payloads and the inbox's trace hooks: billing measured 401,708 B; 405 KB
 * until parkAfterAttempts, replays beyond retention, ConsumerLag and the heartbeat's answer: the
 * examples measured 405,409 and 406,611 B).
 */
const CONSUMER_BUNDLE_MAX_BYTES = 410_000;

/** Each role's package folder. */
const FOLDERS: Record<string, string> = {
  producer: 'shared/producer',
  consumer: 'shared/consumer',
  relay: 'shared/relay',
  cdk: 'infra',
};

/** What `entries` (repository-relative) load at run time: the packages (node_modules names) and the repository's modules. */
async function importGraph(entries: string[]): Promise<{ packages: string[]; modules: string[] }> {
  const result = await build({
    entryPoints: entries.map((entry) => `${root}${entry}`),
    bundle: true,
    platform: 'node',
    format: 'esm',
    packages: 'external',
    write: false,
    metafile: true,
    outdir: '/nonexistent',
    logLevel: 'error',
  });
  const imported = new Set<string>();
  for (const input of Object.values(result.metafile.inputs)) {
    for (const i of input.imports) {
      if (!i.external || i.path.startsWith('node:')) continue;
      imported.add(
        i.path
          .split('/')
          .slice(0, i.path.startsWith('@') ? 2 : 1)
          .join('/'),
      );
    }
  }
  return { packages: [...imported].sort(), modules: Object.keys(result.metafile.inputs).sort() };
}

/** The packages (node_modules names) that the entry points of a role's package import at run time. */
async function packagesImported(role: string): Promise<string[]> {
  const folder = FOLDERS[role] as string;
  const manifest = JSON.parse(await readFile(`${root}${folder}/package.json`, 'utf8')) as {
    exports: Record<string, string>;
  };
  const entries = Object.entries(manifest.exports)
    .filter(([key]) => key !== './package.json')
    .map(([, target]) => `${folder}/${target.replace(/^\.\//, '')}`);
  return (await importGraph(entries)).packages;
}

describe('packages by role', () => {
  it('the producer imports no package but the ORM its adapter is for, and OpenTelemetry from /otel only', async () => {
    // `outbox-relay-aws` itself imports nothing: postgres, pg and zod reach it only as types.
    expect(await packagesImported('producer')).toEqual(['@opentelemetry/api', 'drizzle-orm', 'kysely']);
    expect((await importGraph(['shared/producer/index.ts'])).packages).toEqual([]);
  });

  it('the consumer imports postgres, zod and the RDS signer, and nothing of the relay or the migrations; OpenTelemetry from /otel only', async () => {
    expect(await packagesImported('consumer')).toEqual([
      '@aws-sdk/rds-signer',
      '@opentelemetry/api',
      'postgres',
      'zod',
    ]);
    expect((await importGraph(['shared/consumer/index.ts'])).packages).toEqual([
      '@aws-sdk/rds-signer',
      'postgres',
      'zod',
    ]);
  });

  it("the consumer's command (outbox-inbox) imports commander, the Lambda and SQS clients and what the inbox imports; nothing of the relay, the migration tool or EventBridge", async () => {
    const { packages, modules } = await importGraph(['shared/consumer/cli/main.ts']);
    expect(packages).toEqual([
      '@aws-sdk/client-lambda',
      '@aws-sdk/client-sqs',
      '@aws-sdk/rds-signer',
      'commander',
      'postgres',
      'zod',
    ]);
    expect(modules.filter((m) => m.startsWith('shared/relay/'))).toEqual([]);
    expect(modules).toContain('shared/consumer/cli/index.ts');
  });

  it("the relay's outbox inbox is the consumer's command set (existing invocations keep working)", async () => {
    const { modules } = await importGraph(['shared/relay/cli/main.ts']);
    expect(modules).toContain('shared/consumer/cli/index.ts');
  });

  it("the inbox's entry point reaches neither the consumer's commands nor its operations (a Lambda bundle does not carry them)", async () => {
    const { modules } = await importGraph(['shared/consumer/index.ts']);
    expect(modules.filter((m) => /^shared\/(consumer\/(cli|operations)|platform\/cli)\//.test(m))).toEqual(
      [],
    );
    expect(modules).toContain('shared/consumer/inbox.ts');
  });

  it("the construct imports aws-cdk-lib, constructs and zod (settings checked at synth with the functions' own schemas): its Lambda code is in pre-built bundles", async () => {
    expect(await packagesImported('cdk')).toEqual(['aws-cdk-lib', 'constructs', 'zod']);
  });
});

describe('the peer matrix (npm run test:peers)', () => {
  it("tests each peer's lowest version at the floor of the range the packages declare, and postgres 3 and 4", async () => {
    const manifest = async (folder: string) =>
      JSON.parse(
        await readFile(fileURLToPath(new URL(`../../${folder}/package.json`, import.meta.url)), 'utf8'),
      );
    const producer = await manifest('shared/producer');
    const relay = await manifest('shared/relay');
    const cdk = await manifest('infra');
    const floor = (range: string) => range.match(/\d+\.\d+\.\d+/)?.[0];
    const declared = {
      postgres: [floor(producer.peerDependencies.postgres)],
      pg: [floor(relay.dependencies.pg)],
      'drizzle-orm': [floor(producer.peerDependencies['drizzle-orm'])],
      kysely: [floor(producer.peerDependencies.kysely)],
      'aws-cdk-lib': [floor(cdk.peerDependencies['aws-cdk-lib']), floor(cdk.peerDependencies.constructs)],
    };
    expect(Object.fromEntries(Object.entries(PEERS).map(([name, peer]) => [name, peer.lowest]))).toEqual(
      declared,
    );
    expect(producer.peerDependencies.postgres).toBe('^3.4.9 || ^4.0.0');
  });
});

describe("the example consumer's Lambda bundle", () => {
  it.each(CONSUMER_EXAMPLES)(
    '%s bundles, minified and with the AWS SDK inside, to at most 405 KB, without the relay, the migration tool or pg',
    async (entry) => {
      const { bytes, inputs } = await bundleSize(entry, 'bundled');
      const included = Object.keys(inputs);
      for (const unwanted of [
        'node-pg-migrate',
        'jiti',
        'glob',
        'pg',
        'commander',
        '@aws-sdk/client-eventbridge',
        '@aws-sdk/client-lambda',
        '@aws-sdk/client-sqs',
        '@aws-lambda-powertools/metrics',
        '@middy/core',
        'shared/relay',
        'shared/operations',
      ]) {
        expect(included, `${entry} bundles ${unwanted}`).not.toContain(unwanted);
      }
      expect(bytes).toBeLessThanOrEqual(CONSUMER_BUNDLE_MAX_BYTES);
    },
    60_000,
  );
});
