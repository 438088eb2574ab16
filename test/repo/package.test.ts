/**
 * The packages as a team installs them: `npm run build` stages one package per role in
 * dist/packages/ (scripts/build.ts), `npm pack` packs each, then
 * - a producer-only service installs the producer beside `postgres`: at most 3 packages and 1.5 MB
 *   more, and importing it loads no module of another package (issue 21's bound);
 * - a fresh project installs all four tarballs beside the registry's latest postgres, aws-cdk-lib
 *   and constructs (the README's install line) without ERESOLVE;
 * - a fresh project installs all four tarballs from the npm cache and
 * - type-checks a file that uses every entry point (test/package/check.ts);
 * - on Node 22 and 24: runs `npx outbox migrate`, then imports every entry point, enqueues through
 *   the main API and both adapters into a real Postgres, and relays them (test/package/runtime.ts);
 * - runs `npx outbox bus` from the installed relay package and relays an event to each bus kind
 *   through it with `npx outbox relay`, set up with the exports it prints;
 * - dry-runs the release (`scripts/release.ts --dry-run`: `npm publish --dry-run` of each package);
 * - runs the pre-built relay bundle as Lambda would, on the same database;
 * - synthesises a CDK app with OutboxRelay on an imported VPC and proxy, without esbuild
 *   (test/package/cdk-app.ts);
 * - synthesises a service's app with two OutboxConsumers beside the relay, one per topology,
 *   subscribing to typed events (test/package/consumer-app.ts, consumer-events.ts and the two
 *   handlers, type-checked above): first without esbuild, which fails naming the install, then
 *   with esbuild installed as a team would (`npm i -D esbuild`, its postinstall denied under
 *   `allowScripts`), with a `docker` on the PATH that only records being called. It reads the
 *   template (each rule's pattern is its events' source and detail-type; direct: Lambda's retries
 *   and on-failure queue, the target's retry policy and dead-letter queue; queue: the queue, its
 *   redrive to the dead-letter queue, the event source mapping with ReportBatchItemFailures; the
 *   alarms and dashboard widgets of each), and the consumers' bundles: small, without the AWS
 *   SDK's EventBridge client or aws-cdk-lib;
 * - runs `npx outbox bus --deliver` on that app's synthesised consumers (docs/consumer-local.md):
 *   the relay's events applied by both, a failing one retried as Lambda retries it and recorded,
 *   then replayed from the on-failure queue with `npx outbox-inbox queue replay`, once.
 */
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { existsSync } from 'node:fs';
import { chmod, cp, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import postgres from 'postgres';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { countPackages, folderBytes, IMPORT_PROBE } from '../../scripts/measure.ts';
import { type LocalBus, startLocalBus } from '../../shared/local/bus.ts';
import { OrderPlaced, OrderShipped } from '../package/consumer-events.ts';
import { withDatabase } from '../support/db.ts';
import { lambdaContext } from '../support/lambda.ts';

const exec = promisify(execFile);
const repo = fileURLToPath(new URL('../..', import.meta.url));
const fixtures = join(repo, 'test', 'package');
const MINUTES = 60_000;
const ROLES = ['producer', 'consumer', 'relay', 'cdk'] as const;
/** Each role's package name and its entry points. */
const PACKAGES = {
  producer: {
    name: 'outbox-relay-aws',
    exports: ['.', './drizzle', './kysely', './otel', './package.json', './pg'],
  },
  consumer: {
    name: '@outbox-relay-aws/consumer',
    exports: ['.', './operations', './otel', './package.json'],
  },
  relay: { name: '@outbox-relay-aws/relay', exports: ['.', './operations', './package.json'] },
  cdk: { name: '@outbox-relay-aws/cdk', exports: ['.', './package.json'] },
} as const;

/**
 * The most a consumer's bundle may weigh, bytes: the inbox, postgres, zod/mini and the AWS SDK's
 * RDS signer (the IAM login), minified. Measured 425,035 (direct) and 426,058 (queue, with
 * sqsBatch) on 2026-12-02; aws-cdk-lib pulled in by mistake would be megabytes. The EventBridge
 * client is too small to show in the size (the relay's whole bundle, with it, is 492 kB), so the
 * test looks for it by name.
 */
const BUNDLE_BYTES = 550_000;
/** The fixtures copied into the fresh project, and type-checked there. */
const APP_FILES = [
  'check.ts',
  'runtime.ts',
  'cdk-app.ts',
  'consumer-events.ts',
  'consumer-handler.ts',
  'consumer-queue-handler.ts',
  'consumer-app.ts',
];

/** The parts of a synthesised AWS::Lambda::Function this test reads. */
interface LambdaProperties {
  Handler?: string;
  Runtime?: string;
  Description?: string;
  Code: { S3Key?: string };
}

let work: string;
let app: string;
/** The packed tarball of each role's package (its folder: shared/<role>, or infra for cdk). */
const tarballs: Record<string, string> = {};
let producerOnly: string;
let databaseUrl: string;
let databaseName: string;
let bus: LocalBus;
let node22: string;
const node24 = process.execPath;

/** The version of a package installed in the repository, so the fresh project hits the npm cache. */
async function installedVersion(name: string): Promise<string> {
  const manifest = JSON.parse(await readFile(join(repo, 'node_modules', name, 'package.json'), 'utf8'));
  return `${name}@${manifest.version}`;
}

/** A Node 22 binary: OUTBOX_NODE22, else the npm registry's `node` package in a cache folder. */
async function nodeBinary22(): Promise<string> {
  if (process.env.OUTBOX_NODE22) return process.env.OUTBOX_NODE22;
  const prefix = join(homedir(), '.cache', 'outbox-ci-node22');
  const bin = join(prefix, 'node_modules', '.bin', 'node');
  if (!existsSync(bin)) {
    await exec(
      'npm',
      ['install', '--prefix', prefix, '--no-save', '--prefer-offline', '--no-audit', '--no-fund', 'node@22'],
      {
        timeout: 5 * MINUTES,
      },
    );
  }
  return bin;
}

/** Runs a command in the fresh project with `node` (and so the bin's `#!/usr/bin/env node`) being `nodeBin`. */
function inApp(nodeBin: string, command: string, args: string[], env: Record<string, string> = {}) {
  const binDir = join(nodeBin, '..');
  return exec(command, args, {
    cwd: app,
    timeout: 5 * MINUTES,
    maxBuffer: 16 * 1024 * 1024,
    env: {
      ...process.env,
      PATH: `${binDir}:${join(app, 'node_modules', '.bin')}:${process.env.PATH}`,
      DATABASE_URL: databaseUrl,
      POWERTOOLS_LOG_LEVEL: 'WARN',
      ...env,
    },
  });
}

/**
 * Starts an installed package's command in the fresh project (`npx --no-install …`), in a process
 * group of its own, so that Ctrl-C can be sent as a terminal sends it: to npx and the command both
 * (npx does not forward a SIGINT sent to it alone). `until` waits for a line it prints.
 */
function startInApp(args: string[], env: Record<string, string> = {}) {
  const child = spawn('npx', ['--no-install', ...args], {
    cwd: app,
    env: { ...process.env, PATH: `${join(app, 'node_modules', '.bin')}:${process.env.PATH}`, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  let printed = '';
  child.stdout.on('data', (chunk: Buffer) => {
    printed += chunk.toString();
  });
  child.stderr.on('data', (chunk: Buffer) => {
    printed += chunk.toString();
  });
  return {
    printed: () => printed,
    async until(pattern: RegExp, timeoutMs = 60_000) {
      const deadline = Date.now() + timeoutMs;
      while (!pattern.test(printed)) {
        if (Date.now() > deadline || child.exitCode !== null)
          throw new Error(`not printed ${pattern}: ${printed}`);
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      return printed.match(pattern) as RegExpMatchArray;
    },
    async stop() {
      if (child.exitCode !== null) return;
      const exited = once(child, 'exit');
      process.kill(-(child.pid as number), 'SIGINT');
      await exited;
    },
  };
}

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'outbox-pack-'));
  app = join(work, 'app');
  bus = await startLocalBus();
  const serverUrl = inject('databaseUrl');
  databaseName = `outbox_pack_${randomBytes(6).toString('hex')}`;
  const admin = postgres(serverUrl, { max: 1, onnotice: () => {} });
  await admin.unsafe(`create database ${databaseName}`);
  await admin.end();
  databaseUrl = withDatabase(serverUrl, databaseName);
  node22 = await nodeBinary22();

  // The tsc build, the handler bundles and the four staged packages.
  await exec(process.execPath, [join(repo, 'scripts', 'build.ts')], {
    cwd: repo,
    timeout: 5 * MINUTES,
    maxBuffer: 16 * 1024 * 1024,
  });
  for (const role of ROLES) {
    const { stdout } = await exec('npm', ['pack', '--json', '--pack-destination', work], {
      cwd: join(repo, 'dist', 'packages', role),
      timeout: 5 * MINUTES,
      maxBuffer: 16 * 1024 * 1024,
    });
    const [packed] = JSON.parse(stdout.slice(stdout.indexOf('['))) as { filename: string }[];
    tarballs[role] = join(work, packed?.filename ?? 'missing.tgz');
  }

  producerOnly = join(work, 'producer-only');
  await mkdir(producerOnly);
  await writeFile(
    join(producerOnly, 'package.json'),
    JSON.stringify({ name: 'producer-service', private: true, type: 'module' }),
  );
  await exec(
    'npm',
    [
      'install',
      '--prefer-offline',
      '--no-audit',
      '--no-fund',
      tarballs.producer as string,
      await installedVersion('postgres'),
    ],
    { cwd: producerOnly, timeout: 10 * MINUTES, maxBuffer: 16 * 1024 * 1024 },
  );

  await mkdir(app);
  await writeFile(
    join(app, 'package.json'),
    JSON.stringify({ name: 'service', private: true, type: 'module' }),
  );
  await writeFile(
    join(app, 'tsconfig.json'),
    JSON.stringify({
      compilerOptions: {
        target: 'es2023',
        module: 'nodenext',
        moduleResolution: 'nodenext',
        strict: true,
        noEmit: true,
        skipLibCheck: true,
        types: ['node'],
        // The consumer's files import each other by their .ts names, as Node runs them.
        allowImportingTsExtensions: true,
      },
      files: APP_FILES,
    }),
  );
  for (const file of APP_FILES) await cp(join(fixtures, file), join(app, file));
  // The service's own dependencies (the peers it brings, its tools), at the versions in the npm
  // cache, and the tarball; --prefer-offline takes everything from the cache.
  const extras = await Promise.all(
    [
      'aws-cdk-lib',
      'constructs',
      'postgres',
      'pg',
      'drizzle-orm',
      'kysely',
      'zod',
      'typescript',
      '@types/node',
      '@types/pg',
    ].map(installedVersion),
  );
  await exec(
    'npm',
    ['install', '--prefer-offline', '--no-audit', '--no-fund', ...Object.values(tarballs), ...extras],
    {
      cwd: app,
      timeout: 10 * MINUTES,
      maxBuffer: 16 * 1024 * 1024,
    },
  );
}, 20 * MINUTES);

afterAll(async () => {
  await bus?.close();
  if (databaseName) {
    const admin = postgres(inject('databaseUrl'), { max: 1, onnotice: () => {} });
    await admin.unsafe(`drop database if exists ${databaseName} with (force)`);
    await admin.end();
  }
  if (work) await rm(work, { recursive: true, force: true });
});

describe('the packed package, installed in a fresh project', () => {
  it('a producer-only service: beside postgres, at most 3 packages and 1.5 MB more, and its import loads no other package', async () => {
    const nodeModules = join(producerOnly, 'node_modules');
    const added = (await countPackages(nodeModules)) - 1; // all but postgres
    const addedBytes = (await folderBytes(nodeModules)) - (await folderBytes(join(nodeModules, 'postgres')));
    expect(added).toBeLessThanOrEqual(3);
    expect(addedBytes).toBeLessThanOrEqual(1_500_000);
    const { stdout } = await exec(
      node24,
      ['--input-type=module', '-e', IMPORT_PROBE, 'postgres', 'outbox-relay-aws', 'outbox-relay-aws/pg'],
      { cwd: producerOnly },
    );
    const { packages } = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as { packages: string[] };
    expect(packages.sort()).toEqual(['outbox-relay-aws', 'postgres']);
  });

  it.each(ROLES)(
    'installs %s without install scripts, with compiled JavaScript and declarations, and no TypeScript sources',
    async (role) => {
      const { name, exports } = PACKAGES[role];
      const installed = join(app, 'node_modules', name);
      const manifest = JSON.parse(await readFile(join(installed, 'package.json'), 'utf8'));
      expect(manifest.private).toBeUndefined();
      for (const script of ['preinstall', 'install', 'postinstall'])
        expect(manifest.scripts?.[script]).toBeUndefined();
      expect(Object.keys(manifest.exports).sort()).toEqual([...exports].sort());
      const files = await readdir(installed, { recursive: true });
      expect(files.filter((f) => f.endsWith('.ts') && !f.endsWith('.d.ts'))).toEqual([]);
      for (const target of Object.values(manifest.exports) as (
        | string
        | { types: string; default: string }
      )[]) {
        if (typeof target === 'string') continue;
        expect(files).toContain(target.types.slice(2));
        expect(files).toContain(target.default.slice(2));
      }
      if (role === 'cdk') {
        expect(manifest.peerDependencies).toMatchObject({
          'aws-cdk-lib': expect.any(String),
          constructs: expect.any(String),
        });
        for (const handler of ['relay', 'monitor', 'migrate'])
          expect(files).toContain(join('dist', 'lambda', handler, 'index.mjs'));
        expect(files).toContain(join('dist', 'lambda', 'migrate', 'migrations', '007_outbox_enqueue.sql'));
      }
      if (role === 'consumer') {
        expect(manifest.bin).toEqual({ 'outbox-inbox': 'shared/consumer/bin/outbox-inbox.js' });
        expect(files).toContain(join('dist', 'shared', 'consumer', 'cli', 'main.js'));
        // The consumer's command carries nothing of the relay.
        expect(files.filter((f) => f.startsWith(join('dist', 'shared', 'relay')))).toEqual([]);
      }
      if (role === 'relay') {
        expect(manifest.bin).toEqual({ outbox: 'shared/relay/bin/outbox.js' });
        expect(files).toContain(join('dist', 'migrations', '007_outbox_enqueue.sql'));
      }
      if (role === 'producer') expect(manifest.dependencies).toBeUndefined();
      // The service did not get esbuild: synthesis below must not need it.
      expect(existsSync(join(app, 'node_modules', 'esbuild'))).toBe(false);
    },
  );

  it(
    "installs the four tarballs beside the registry's latest postgres, aws-cdk-lib and constructs without ERESOLVE (the README's install line)",
    async () => {
      // Issue 47: the producer's peer range once stopped `npm install outbox-relay-aws postgres`
      // when the registry's postgres moved to 4. This install asks the registry, as a new project
      // does, for each package's latest, and must resolve every peer range against it.
      const latest = join(work, 'latest');
      await mkdir(latest);
      await writeFile(
        join(latest, 'package.json'),
        JSON.stringify({ name: 'latest', private: true, type: 'module' }),
      );
      const peers = ['postgres', 'aws-cdk-lib', 'constructs'];
      const result = await exec(
        'npm',
        ['install', '--prefer-online', '--no-audit', '--no-fund', ...Object.values(tarballs), ...peers],
        { cwd: latest, timeout: 10 * MINUTES, maxBuffer: 16 * 1024 * 1024 },
      ).catch((error: { stderr?: string; code?: unknown }) => error);
      expect((result as { stderr?: string }).stderr ?? '').not.toMatch(/ERESOLVE/);
      expect((result as { code?: unknown }).code).toBeUndefined();
      for (const name of peers) {
        const { stdout } = await exec('npm', ['view', name, 'dist-tags.latest'], { cwd: latest });
        const installed = JSON.parse(
          await readFile(join(latest, 'node_modules', name, 'package.json'), 'utf8'),
        );
        expect({ name, version: installed.version }).toEqual({ name, version: stdout.trim() });
      }
      // The producer runs on what was installed: it imports beside the latest postgres.
      const probe = await exec(
        node24,
        [
          '--input-type=module',
          '-e',
          "const { default: postgres } = await import('postgres'); const { enqueue } = await import('outbox-relay-aws'); console.log(typeof postgres, typeof enqueue)",
        ],
        { cwd: latest },
      );
      expect(probe.stdout.trim()).toBe('function function');
      // And its types take the latest postgres's transaction and pool (the declarations name
      // `postgres.Sql` and `postgres.TransactionSql`, which resolve to the service's postgres).
      await exec(
        'npm',
        [
          'install',
          '--prefer-offline',
          '--no-audit',
          '--no-fund',
          ...(await Promise.all(['typescript', '@types/node'].map(installedVersion))),
        ],
        { cwd: latest, timeout: 10 * MINUTES, maxBuffer: 16 * 1024 * 1024 },
      );
      await writeFile(
        join(latest, 'service.ts'),
        [
          "import postgres from 'postgres';",
          "import { enqueue, enqueueMany } from 'outbox-relay-aws';",
          "const event = { type: 'T', source: 's', aggregateType: 'a', aggregateId: '1', payload: {} };",
          'export async function produce(sql: postgres.Sql): Promise<void> {',
          '  await sql.begin(async (tx) => {',
          '    await enqueue(tx, event);',
          '    await enqueueMany(tx, [event]);',
          '  });',
          '  await enqueue(sql, event);',
          '}',
          '',
        ].join('\n'),
      );
      await writeFile(
        join(latest, 'tsconfig.json'),
        JSON.stringify({
          compilerOptions: {
            target: 'es2023',
            module: 'nodenext',
            moduleResolution: 'nodenext',
            strict: true,
            noEmit: true,
            skipLibCheck: true,
            types: ['node'],
          },
          files: ['service.ts'],
        }),
      );
      const typed = await exec(join(latest, 'node_modules', '.bin', 'tsc'), ['-p', 'tsconfig.json'], {
        cwd: latest,
        timeout: 5 * MINUTES,
      }).catch((error: { stdout?: string }) => error);
      expect((typed as { stdout?: string }).stdout ?? '').toBe('');
    },
    10 * MINUTES,
  );

  it(
    'type-checks a file that uses every entry point',
    async () => {
      const result = await inApp(node24, 'tsc', ['-p', 'tsconfig.json']).catch(
        (error: { stdout?: string }) => error,
      );
      expect((result as { stdout?: string }).stdout ?? '').toBe('');
    },
    5 * MINUTES,
  );

  it.each([
    ['22', () => node22],
    ['24', () => node24],
  ])(
    'runs on Node %s: `npx outbox migrate`, every entry point, enqueue into Postgres, relay to the bus',
    async (major, bin) => {
      const nodeBin = bin();
      const { stdout: version } = await inApp(nodeBin, nodeBin, ['--version']);
      expect(version.trim()).toMatch(new RegExp(`^v${major}\\.`));

      await inApp(nodeBin, 'npx', ['--no-install', 'outbox', 'migrate']);
      // The consumer package's command, and the relay's `outbox inbox`, read the same inbox.
      for (const command of [['outbox-inbox'], ['outbox', 'inbox']]) {
        const { stdout: parked } = await inApp(nodeBin, 'npx', [
          '--no-install',
          ...command,
          'parked',
          'list',
          '--consumer',
          'billing',
          '--json',
        ]);
        expect(JSON.parse(parked)).toEqual([]);
      }
      bus.reset();
      const { stdout } = await inApp(nodeBin, nodeBin, ['runtime.ts'], { BUS_URL: bus.url });
      const report = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}');
      expect(report.node.split('.')[0]).toBe(major);
      expect(report.entryPoints).toEqual({ consumer: 'function', operations: 'function', cdk: 'function' });
      expect(
        report.enqueued.map((r: { aggregateId: string; duplicate: boolean }) => [r.aggregateId, r.duplicate]),
      ).toEqual([
        ['postgres', false],
        ['pg', false],
        ['drizzle', false],
        ['kysely', false],
      ]);
      expect(report.published).toBe(4);

      const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
      try {
        const rows = await sql<{ aggregate_id: string; published: boolean }[]>`
        select aggregate_id, published_at is not null as published from outbox.outbox
        where aggregate_type = ${`node-${report.node}`} order by aggregate_id`;
        expect(rows).toEqual([
          { aggregate_id: 'drizzle', published: true },
          { aggregate_id: 'kysely', published: true },
          { aggregate_id: 'pg', published: true },
          { aggregate_id: 'postgres', published: true },
        ]);
      } finally {
        await sql.end();
      }
      expect(bus.events.map((e) => e.detailType)).toEqual([
        'PackageTested',
        'PackageTested',
        'PackageTested',
        'PackageTested',
      ]);
    },
    10 * MINUTES,
  );

  it(
    '`npx outbox bus` from the installed relay package: both bus kinds, with the exports it prints, take what `npx outbox relay` sends',
    async () => {
      const { printed, until, stop } = startInApp(['outbox', 'bus', '--port', '0']);
      try {
        const [, classic = ''] = await until(/^ {2}export (EVENT_BUS_NAME=.*)$/m);
        const [, custom = ''] = await until(
          /^ {2}or, for a Custom Event Bus: export (\S+ \S+ .*?) \(and no/m,
        );
        /** The variables of one `export A=1 B=2` line the bus printed. */
        const vars = (line: string) =>
          Object.fromEntries(line.split(' ').map((kv) => kv.split('=', 2) as [string, string]));
        await inApp(node24, 'npx', ['--no-install', 'outbox', 'migrate']); // a no-op after the runtime test
        const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
        try {
          for (const [kind, exports] of [
            ['classic', classic],
            ['custom', custom],
          ] as const) {
            await sql`select * from outbox.outbox_enqueue(event_type => 'BusCommandTested', source => 'test.package',
              aggregate_type => 'bus-command', aggregate_id => ${kind}, payload => '{"ok": true}'::jsonb)`;
            const { EVENT_BUS_NAME: _unset, ...rest } = process.env;
            await exec('npx', ['--no-install', 'outbox', 'relay', '--until-empty', '--quiet'], {
              cwd: app,
              timeout: 2 * MINUTES,
              env: {
                ...rest,
                PATH: `${join(app, 'node_modules', '.bin')}:${process.env.PATH}`,
                DATABASE_URL: databaseUrl,
                ...vars(exports),
              },
            });
            // Each accepted event is a line: time, bus, source, DetailType, detail.
            await until(new RegExp(`test\\.package {2}BusCommandTested {2}.*"aggregateId":"${kind}"`));
          }
          const rows = await sql<{ aggregate_id: string; published: boolean }[]>`
            select aggregate_id, published_at is not null as published from outbox.outbox
            where aggregate_type = 'bus-command' order by aggregate_id`;
          expect(rows).toEqual([
            { aggregate_id: 'classic', published: true },
            { aggregate_id: 'custom', published: true },
          ]);
        } finally {
          await sql.end();
        }
        expect(printed()).toMatch(/ {2}demo {2}test\.package {2}BusCommandTested /);
        expect(printed()).toMatch(
          / {2}arn:aws:events:us-east-1:000000000000:event-busv2\/demo\/local {2}test\.package {2}BusCommandTested /,
        );
      } finally {
        await stop();
      }
      // npx ends as npm does on Ctrl-C (by the signal); the bus stopped without an error.
      expect(printed()).not.toMatch(/error/i);
    },
    5 * MINUTES,
  );

  it(
    '`npm run release -- --dry-run`: npm publish --dry-run passes for each built package, at one version, with its license and changelog',
    async () => {
      const { stdout } = await exec(
        process.execPath,
        [join(repo, 'scripts', 'release.ts'), '--dry-run', '--no-build', '--json'],
        { cwd: repo, timeout: 5 * MINUTES, maxBuffer: 16 * 1024 * 1024 },
      );
      const report = JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as {
        dryRun: boolean;
        version: string;
        packages: { name: string; version: string; files: number; packedBytes: number }[];
      };
      const version = JSON.parse(
        await readFile(join(repo, 'shared', 'relay', 'package.json'), 'utf8'),
      ).version;
      expect(report.dryRun).toBe(true);
      expect(report.packages.map((p) => `${p.name}@${p.version}`)).toEqual(
        ROLES.map((role) => `${PACKAGES[role].name}@${version}`),
      );
      for (const role of ROLES) {
        const installed = await readdir(join(app, 'node_modules', PACKAGES[role].name));
        expect(installed).toEqual(expect.arrayContaining(['LICENSE', 'CHANGELOG.md', 'README.md']));
        const manifest = JSON.parse(
          await readFile(join(app, 'node_modules', PACKAGES[role].name, 'package.json'), 'utf8'),
        );
        expect(manifest.publishConfig).toEqual({ access: 'public', provenance: true });
        expect(manifest.repository.directory).toBe(role === 'cdk' ? 'infra' : `shared/${role}`);
      }
    },
    5 * MINUTES,
  );

  it(
    'ships a relay bundle that publishes when invoked as the Lambda runtime would',
    async () => {
      const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
      try {
        await sql`select * from outbox.outbox_enqueue(event_type => 'BundleTested', source => 'test.package',
        aggregate_type => 'bundle', aggregate_id => '1', payload => '{"ok": true}'::jsonb)`;
      } finally {
        await sql.end();
      }
      bus.reset();
      const bundle = join(
        app,
        'node_modules',
        '@outbox-relay-aws',
        'cdk',
        'dist',
        'lambda',
        'relay',
        'index.mjs',
      );
      const saved = { ...process.env };
      Object.assign(process.env, {
        DATABASE_URL: databaseUrl,
        EVENT_BUS_NAME: 'package-bus',
        OUTBOX_POLL_INTERVAL_MS: '20',
        AWS_ENDPOINT_URL_EVENTBRIDGE: bus.url,
        AWS_REGION: 'us-east-1',
        AWS_ACCESS_KEY_ID: 'local',
        AWS_SECRET_ACCESS_KEY: 'local',
      });
      try {
        const { handler } = (await import(pathToFileURL(bundle).href)) as {
          handler: (event: unknown, context: unknown) => Promise<{ published: number }>;
        };
        // The invocation polls until close to its deadline: 3 s are kept back, and a pass needs a
        // lease of at least 5 s, so 9 s give it about one second of polling.
        const summary = await handler({}, lambdaContext(9_000, 'outbox-relay'));
        expect(summary).toMatchObject({ published: 1, deadLettered: 0 });
      } finally {
        process.env = saved;
      }
      expect(bus.events.map((e) => e.detailType)).toEqual(['BundleTested']);
    },
    2 * MINUTES,
  );

  it(
    'synthesises OutboxRelay on an imported VPC and proxy from the pre-built bundles, without esbuild',
    async () => {
      const out = join(work, 'cdk.out');
      await inApp(node24, node24, ['cdk-app.ts', out]);
      for (const stackName of ['ServiceStack', 'MigratedStack']) {
        const template = JSON.parse(await readFile(join(out, `${stackName}.template.json`), 'utf8'));
        const functions = Object.values(
          template.Resources as Record<string, { Type: string; Properties: LambdaProperties }>,
        ).filter((r) => r.Type === 'AWS::Lambda::Function' && r.Properties.Description?.startsWith('Outbox'));
        expect(functions.length).toBe(stackName === 'ServiceStack' ? 2 : 3);
        for (const f of functions) {
          expect(f.Properties.Handler).toBe('index.handler');
          expect(f.Properties.Runtime).toBe('nodejs24.x');
          const hash = String(f.Properties.Code.S3Key).replace(/\.zip$/, '');
          const asset = join(out, `asset.${hash}`);
          expect(existsSync(join(asset, 'index.mjs'))).toBe(true);
          if (/migrations/i.test(f.Properties.Description ?? '')) {
            expect(existsSync(join(asset, 'migrations', '007_outbox_enqueue.sql'))).toBe(true);
          }
        }
      }
    },
    5 * MINUTES,
  );

  it(
    'synthesises a direct and a queue OutboxConsumer on typed events, bundling their handlers with esbuild, never Docker',
    async () => {
      type Resource = { Type: string; Properties: Record<string, unknown> };
      const out = join(work, 'cdk.out-consumers');
      // The app's PATH: Node 24, the app's bins, and the system's, but no other node_modules/.bin
      // (npx puts the repository's on this process's PATH, whose esbuild the construct would
      // find), and a docker that only records being called, ahead of any real one.
      const fakeBin = join(work, 'fake-bin');
      const dockerCalls = join(work, 'docker-calls.txt');
      await mkdir(fakeBin, { recursive: true });
      await writeFile(join(fakeBin, 'docker'), `#!/bin/sh\necho "$@" >> '${dockerCalls}'\nexit 1\n`);
      await chmod(join(fakeBin, 'docker'), 0o755);
      await symlink(node24, join(fakeBin, 'node'));
      const systemPath = (process.env.PATH ?? '').split(':').filter((dir) => !dir.includes('node_modules'));
      const PATH = [fakeBin, join(app, 'node_modules', '.bin'), ...systemPath].join(':');
      const synth = () => inApp(node24, node24, ['consumer-app.ts', out], { PATH });

      // Without esbuild the consumers cannot be bundled locally: synth fails, naming the install.
      const refused = (await synth().then(
        () => ({ stderr: 'synthesised without esbuild' }),
        (error: { stderr?: string }) => error,
      )) as { stderr?: string };
      expect(refused.stderr).toContain('npm i -D esbuild');

      // esbuild as a team adds it. Its postinstall only swaps the JavaScript launcher for the
      // native binary (and checks it): denied under allowScripts, as in this repository, so that
      // npm 11 neither runs it nor warns, and esbuild still runs through the launcher.
      const manifestFile = join(app, 'package.json');
      const manifest = JSON.parse(await readFile(manifestFile, 'utf8'));
      await writeFile(
        manifestFile,
        `${JSON.stringify({ ...manifest, allowScripts: { ...manifest.allowScripts, esbuild: false } }, null, 2)}\n`,
      );
      const esbuild = await installedVersion('esbuild');
      const installed = await inApp(node24, 'npm', [
        'install',
        '--save-dev',
        '--prefer-offline',
        '--no-audit',
        '--no-fund',
        esbuild,
      ]);
      expect(installed.stderr).not.toContain('install-scripts');
      const launcher = await readFile(join(app, 'node_modules', 'esbuild', 'bin', 'esbuild'));
      expect(launcher.subarray(0, 2).toString()).toBe('#!'); // still the script: the postinstall did not run
      const { stdout: version } = await inApp(node24, 'esbuild', ['--version'], { PATH });
      expect(`esbuild@${version.trim()}`).toBe(esbuild);

      const synthesised = await synth();
      expect(existsSync(dockerCalls), 'docker was called').toBe(false);
      expect(synthesised.stderr).not.toMatch(/docker/i);
      const template = JSON.parse(await readFile(join(out, 'ConsumersStack.template.json'), 'utf8'));
      const resources = template.Resources as Record<string, Resource>;
      /** The one resource of a type whose logical id is the construct path's (`BillingRule`) and a hash. */
      const only = (prefix: string, type: string): [string, Record<string, unknown>] => {
        const found = Object.entries(resources).filter(
          ([id, r]) => r.Type === type && new RegExp(`^${prefix}[0-9A-F]{8}$`).test(id),
        );
        expect(found.map(([id]) => id)).toHaveLength(1);
        const [id, resource] = found[0] as [string, Resource];
        return [id, resource.Properties];
      };
      const arn = (id: string) => ({ 'Fn::GetAtt': [id, 'Arn'] });
      const ofType = (type: string) => Object.entries(resources).filter(([, r]) => r.Type === type);
      const bundles: Record<string, string> = {};

      for (const [name, event] of [
        ['Billing', OrderPlaced],
        ['Notifications', OrderShipped],
      ] as const) {
        const [fn, fnProps] = only(`${name}Function`, 'AWS::Lambda::Function');
        const [, rule] = only(`${name}Rule`, 'AWS::Events::Rule');
        const [dlq] = only(`${name}DeadLetterQueue`, 'AWS::SQS::Queue');
        const [failed] = only(`${name}FailedEventsQueue`, 'AWS::SQS::Queue');
        // With the relay monitor's heartbeat (docs/observe.md#the-heartbeat).
        expect(rule.EventPattern).toEqual({
          source: [event.source, 'outbox.heartbeat'],
          'detail-type': [event.type, 'OutboxHeartbeat'],
        });
        const [target] = rule.Targets as Record<string, unknown>[];
        expect(target).toMatchObject({
          RetryPolicy: { MaximumRetryAttempts: 185, MaximumEventAgeInSeconds: 86_400 },
          DeadLetterConfig: { Arn: arn(dlq) },
        });
        const invokeConfigs = ofType('AWS::Lambda::EventInvokeConfig').filter(
          ([, r]) => (r.Properties.FunctionName as { Ref?: string }).Ref === fn,
        );
        const mappings = ofType('AWS::Lambda::EventSourceMapping').filter(
          ([, r]) => (r.Properties.FunctionName as { Ref?: string }).Ref === fn,
        );
        if (name === 'Billing') {
          expect(target?.Arn).toEqual(arn(fn));
          expect(invokeConfigs.map(([, r]) => r.Properties)).toEqual([
            expect.objectContaining({
              MaximumRetryAttempts: 2,
              DestinationConfig: { OnFailure: { Destination: arn(failed) } },
            }),
          ]);
          expect(mappings).toEqual([]);
        } else {
          const [queue, queueProps] = only(`${name}Queue`, 'AWS::SQS::Queue');
          expect(queueProps.RedrivePolicy).toEqual({ deadLetterTargetArn: arn(failed), maxReceiveCount: 5 });
          expect(target?.Arn).toEqual(arn(queue));
          expect(mappings.map(([, r]) => r.Properties)).toEqual([
            expect.objectContaining({
              EventSourceArn: arn(queue),
              FunctionResponseTypes: ['ReportBatchItemFailures'],
            }),
          ]);
          expect(invokeConfigs).toEqual([]);
        }
        const alarms = ofType('AWS::CloudWatch::Alarm').filter(([id]) => id.startsWith(name));
        // errors, parked, lag and heartbeat, and the failure queues' (and the queue's age).
        expect(alarms).toHaveLength(name === 'Billing' ? 6 : 7);

        // The bundle: Node 24 ESM, esbuild's output of the handler and what it imports.
        expect(fnProps).toMatchObject({ Handler: 'index.handler', Runtime: 'nodejs24.x' });
        const hash = String((fnProps.Code as { S3Key: string }).S3Key).replace(/\.zip$/, '');
        const bundle = join(out, `asset.${hash}`, 'index.mjs');
        bundles[name] = await readFile(bundle, 'utf8');
        expect(bundles[name]).toContain(event.type);
        expect((await stat(bundle)).size, `${name}'s bundle size`).toBeLessThan(BUNDLE_BYTES);
      }
      for (const code of Object.values(bundles)) {
        // The inbox and its typed event are in; the EventBridge client (the relay's) and the CDK are not.
        expect(code).toContain('InboxGapError');
        expect(code).not.toMatch(/EventBridgeClient|PutEventsCommand|AWSEvents\./);
        expect(code).not.toMatch(/aws-cdk-lib|@aws-cdk\/|CfnResource/);
      }
      // sqsBatch only where the handler uses it (the consumer package is tree-shaken).
      expect(bundles.Notifications).toContain('batchItemFailures');
      expect(bundles.Billing).not.toContain('batchItemFailures');

      // Both consumers' widgets are on the relay's dashboard.
      const dashboards = ofType('AWS::CloudWatch::Dashboard').map(([, r]) => JSON.stringify(r.Properties));
      expect(dashboards).toHaveLength(1);
      expect(dashboards[0]).toContain('billing: failure queues (messages)');
      expect(dashboards[0]).toContain('notifications: queue (messages, age in s)');
    },
    10 * MINUTES,
  );

  it(
    "`npx outbox bus --deliver` runs the synthesised consumers on the relay's events: applied, retried, recorded, replayed with outbox-inbox",
    async () => {
      // The consumers synthesised by the test above, as docs/consumer-local.md runs them: the
      // service's tables, then the bus with its consumers, then the relay.
      const sql = postgres(databaseUrl, { max: 1, onnotice: () => {} });
      const { printed, until, stop } = startInApp(
        [
          'outbox',
          'bus',
          '--port',
          '0',
          '--deliver',
          join(work, 'cdk.out-consumers'),
          '--retry-delay-scale',
          '0.01',
        ],
        { DATABASE_URL: databaseUrl },
      );
      try {
        await sql`create table invoice (order_id text primary key, total numeric not null)`;
        await sql`create table shipment_notice (order_id text primary key, carrier text not null)`;
        const [, busExports = ''] = await until(/^ {2}export (EVENT_BUS_NAME=.*)$/m);
        const [, replayExports = ''] = await until(/^ {2}for outbox inbox .*: export (.*)$/m);
        expect(printed()).toMatch(
          /^delivering to billing \(direct; --function-name Billing\w+ or billing\): Lambda's 2 asynchronous retries after 0\.6 s and 1\.2 s, then the on-failure queue$/m,
        );
        expect(printed()).toMatch(
          /^delivering to notifications \(queue; .*\): batches of 10 with partial batch responses/m,
        );
        const [, failedQueue = ''] = await until(/^ {2}on-failure queue: (\S+)$/m);
        const vars = (line: string) =>
          Object.fromEntries(line.split(' ').map((kv) => kv.split('=', 2) as [string, string]));
        const enqueue = (type: string, source: string, id: string, payload: object) =>
          sql`select * from outbox.outbox_enqueue(event_type => ${type}, source => ${source},
            aggregate_type => 'order', aggregate_id => ${id}, payload => ${sql.json(payload as never)})`;
        const relay = () =>
          inApp(
            node24,
            'npx',
            ['--no-install', 'outbox', 'relay', '--until-empty', '--quiet'],
            vars(busExports),
          );
        const until30 = async (check: () => Promise<boolean>, what: string) => {
          const deadline = Date.now() + 30_000;
          while (!(await check())) {
            if (Date.now() > deadline) throw new Error(`${what}: ${printed()}`);
            await new Promise((resolve) => setTimeout(resolve, 100));
          }
        };

        // Delivered: the rule's Lambda target and the queue topology's batch, each applied once.
        await enqueue('OrderPlaced', 'shop.orders', 'p-1', { orderId: 'p-1', total: 12 });
        await enqueue('OrderShipped', 'shop.warehouse', 'p-1', { orderId: 'p-1', carrier: 'dhl' });
        await relay();
        await until30(
          async () => (await sql`select 1 from invoice union all select 1 from shipment_notice`).length === 2,
          'the invoice and the shipment notice',
        );

        // Broken: the table is away, so billing fails every attempt and its record is kept.
        await sql`alter table invoice rename to invoice_away`;
        await enqueue('OrderPlaced', 'shop.orders', 'p-2', { orderId: 'p-2', total: 7 });
        await relay();
        await until(
          /billing ← OrderPlaced order\/p-2 #1: failed \(.*\) on every attempt \(3\): its invocation record is in the on-failure queue/,
        );
        expect(
          printed().match(/billing ← OrderPlaced order\/p-2 #1: failed .*Lambda retries it \([12] of 2\)/g),
        ).toHaveLength(2);
        const [trace] = await sql<{ attempts: number }[]>`
          select attempts from outbox.inbox_failed where consumer = 'billing' and event ->> 'detail-type' = 'OrderPlaced'`;
        expect(trace?.attempts).toBe(3);

        // Fixed, then replayed from the on-failure queue with the documented command, once.
        await sql`alter table invoice_away rename to invoice`;
        const { stdout } = await inApp(
          node24,
          'npx',
          [
            '--no-install',
            'outbox-inbox',
            'queue',
            'replay',
            '--queue-url',
            failedQueue,
            '--consumer',
            'billing',
            '--function-name',
            'billing',
            '--yes',
            '--json',
          ],
          vars(replayExports),
        );
        const replayed = JSON.parse(stdout) as { replayed: number; events: { outcome: string }[] };
        expect(replayed.events.map((e) => e.outcome)).toEqual(['applied']);
        expect(await sql`select order_id from invoice order by order_id`).toEqual([
          { order_id: 'p-1' },
          { order_id: 'p-2' },
        ]);
        expect(await sql`select 1 from outbox.inbox_failed where consumer = 'billing'`).toHaveLength(0);
      } finally {
        await stop();
        await sql.end();
      }
      expect(printed()).not.toMatch(/^error/im);
    },
    5 * MINUTES,
  );
});
