/**
 * `npm run footprint`: what each package costs the service that installs it (issue 21).
 *
 * Builds the packages (scripts/build.ts), packs each one (`npm pack`), and installs each tarball
 * into a fresh project beside what that role's service already has: `postgres` for the producer,
 * the consumer and the relay; `aws-cdk-lib` and `constructs` for the construct. Registry packages
 * come at the repository's installed versions, from the npm cache when it has them
 * (`--prefer-offline`). For each it prints:
 * - packages added and MB on disk (node_modules, apparent size) beyond the baseline install;
 * - the time to start Node and import the baseline's main package and then this package's main
 *   entry (wall clock, ms), and the process's RSS after it (MB), beside the same for the
 *   baseline's import alone: medians of 5 runs of each, alternated so both see the same load;
 * - how many modules the import loaded from node_modules, and any from the AWS SDK.
 * Then the example consumer handlers bundled with esbuild, minified (scripts/measure.ts).
 *
 * The figures depend on the machine and its load: compare lines of one run, not runs.
 * Flags: `--no-build` reuses dist/packages; `--keep` leaves the temporary projects (path printed);
 * `--help` prints the usage and exits 0; an unknown flag exits 2 with the usage.
 */
import { execFile } from 'node:child_process';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import {
  bundleSize,
  CONSUMER_EXAMPLES,
  countPackages,
  folderBytes,
  IMPORT_PROBE,
  schemaBundleBytes,
  ZOD_SCHEMAS,
} from './measure.ts';

const exec = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));
const usage =
  'usage: npm run footprint -- [--no-build] [--keep] [--help]\n' +
  '  builds and packs each package, installs it in a fresh project, and prints its install size and import time\n' +
  '  --no-build  reuse dist/packages instead of running scripts/build.ts first\n' +
  '  --keep      leave the temporary projects (their path is printed)';
let args: { 'no-build'?: boolean; keep?: boolean; help?: boolean };
try {
  ({ values: args } = parseArgs({
    options: {
      'no-build': { type: 'boolean' },
      keep: { type: 'boolean' },
      help: { type: 'boolean', short: 'h' },
    },
  }));
} catch (error) {
  console.error(`${(error as Error).message}\n${usage}`);
  process.exit(2);
}
if (args.help) {
  console.log(usage);
  process.exit(0);
}
const RUNS = 5;

/** Each role's package, what its service already has installed, and what its import is measured on. */
const ROLES = [
  { role: 'producer', name: 'outbox-relay-aws', baseline: ['postgres'] },
  { role: 'consumer', name: '@outbox-relay-aws/consumer', baseline: ['postgres'] },
  { role: 'relay', name: '@outbox-relay-aws/relay', baseline: ['postgres'] },
  { role: 'cdk', name: '@outbox-relay-aws/cdk', baseline: ['aws-cdk-lib', 'constructs'] },
] as const;

async function installedVersion(name: string): Promise<string> {
  const manifest = JSON.parse(await readFile(join(root, 'node_modules', name, 'package.json'), 'utf8'));
  return `${name}@${manifest.version}`;
}

/** A fresh project with `specs` installed; returns its folder. */
async function project(work: string, label: string, specs: string[]): Promise<string> {
  const dir = join(work, label);
  await mkdir(dir);
  await writeFile(join(dir, 'package.json'), JSON.stringify({ name: label, private: true, type: 'module' }));
  await exec(
    'npm',
    ['install', '--prefer-offline', '--no-audit', '--no-fund', '--ignore-scripts', ...specs],
    {
      cwd: dir,
      maxBuffer: 16 * 1024 * 1024,
    },
  );
  return dir;
}

interface ImportFigures {
  ms: number;
  rssMB: number;
  modules: number;
  packages: string[];
}

/** One Node process that imports `specifiers` in `dir`: its wall time (ms) and what the probe printed. */
async function importOnce(dir: string, specifiers: string[]) {
  const start = performance.now();
  const { stdout } = await exec(
    process.execPath,
    ['--input-type=module', '-e', IMPORT_PROBE, ...specifiers],
    {
      cwd: dir,
    },
  );
  const ms = performance.now() - start;
  return {
    ms,
    ...(JSON.parse(stdout.trim().split('\n').at(-1) ?? '{}') as Omit<ImportFigures, 'ms' | 'rssMB'> & {
      rss: number;
    }),
  };
}

/**
 * The import of `specifiers` in `dir` and of the baseline's in `baseDir`, run alternately
 * ({@link RUNS} rounds) so that both see the same machine load: medians of time and RSS.
 */
async function measureImports(
  dir: string,
  specifiers: string[],
  baseDir: string,
  baseSpecifiers: string[],
): Promise<{ figures: ImportFigures; base: ImportFigures }> {
  const runs: Awaited<ReturnType<typeof importOnce>>[] = [];
  const baseRuns: Awaited<ReturnType<typeof importOnce>>[] = [];
  for (let i = 0; i < RUNS; i++) {
    baseRuns.push(await importOnce(baseDir, baseSpecifiers));
    runs.push(await importOnce(dir, specifiers));
  }
  const median = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? 0;
  const summary = (all: typeof runs): ImportFigures => ({
    ms: median(all.map((r) => r.ms)),
    rssMB: median(all.map((r) => r.rss)) / 1e6,
    modules: all.at(-1)?.modules ?? 0,
    packages: all.at(-1)?.packages ?? [],
  });
  return { figures: summary(runs), base: summary(baseRuns) };
}

const mb = (bytes: number) => (bytes / 1e6).toFixed(2);
const kib = (bytes: number) => (bytes / 1024).toFixed(0);

if (!args['no-build']) await exec(process.execPath, [join(root, 'scripts', 'build.ts')], { cwd: root });
const work = await mkdtemp(join(tmpdir(), 'outbox-footprint-'));
try {
  const tarballs: Record<string, string> = {};
  for (const { role } of ROLES) {
    const { stdout } = await exec('npm', ['pack', '--json', '--pack-destination', work], {
      cwd: join(root, 'dist', 'packages', role),
      maxBuffer: 16 * 1024 * 1024,
    });
    const [packed] = JSON.parse(stdout.slice(stdout.indexOf('['))) as { filename: string; size: number }[];
    tarballs[role] = join(work, packed?.filename ?? 'missing.tgz');
    console.log(`footprint: packed ${packed?.filename} (${kib(packed?.size ?? 0)} KiB)`);
  }

  const baselines = new Map<string, { dir: string; packages: number; bytes: number }>();
  console.log(
    '\n| package | beside | packages added | MB added | import ms (beside alone) | RSS MB (beside alone) | modules from node_modules | AWS SDK modules |',
  );
  console.log('|---|---|---|---|---|---|---|---|');
  for (const { role, name, baseline } of ROLES) {
    const key = baseline.join('+');
    const specs = await Promise.all(baseline.map(installedVersion));
    let base = baselines.get(key);
    if (!base) {
      const dir = await project(work, `baseline-${baseline.join('-')}`, specs);
      base = {
        dir,
        packages: await countPackages(join(dir, 'node_modules')),
        bytes: await folderBytes(join(dir, 'node_modules')),
      };
      baselines.set(key, base);
    }
    const dir = await project(work, role, [tarballs[role] as string, ...specs]);
    const packages = (await countPackages(join(dir, 'node_modules'))) - base.packages;
    const bytes = (await folderBytes(join(dir, 'node_modules'))) - base.bytes;
    const { figures, base: alone } = await measureImports(dir, [baseline[0], name], base.dir, [baseline[0]]);
    const sdk = figures.packages.filter((p) => p.startsWith('@aws-sdk/') || p.startsWith('@smithy/'));
    console.log(
      `| ${name} | ${key} | ${packages} | ${mb(bytes)} | ${figures.ms.toFixed(0)} (${alone.ms.toFixed(0)}) | ` +
        `${figures.rssMB.toFixed(0)} (${alone.rssMB.toFixed(0)}) | ${figures.modules} | ${sdk.length === 0 ? 'none' : sdk.length} |`,
    );
  }

  console.log(
    '\n| consumer bundle (esbuild, minified, ESM, node24) | AWS SDK bundled | @aws-sdk/* external |',
  );
  console.log('|---|---|---|');
  for (const entry of CONSUMER_EXAMPLES) {
    const bundled = await bundleSize(entry, 'bundled');
    const external = await bundleSize(entry, 'external');
    console.log(`| ${entry} | ${kib(bundled.bytes)} KiB | ${kib(external.bytes)} KiB |`);
  }

  console.log('\n| a schema, bundled alone (esbuild, minified) | zod/mini | zod |');
  console.log('|---|---|---|');
  for (const [name, schema] of Object.entries(ZOD_SCHEMAS)) {
    const mini = await schemaBundleBytes(schema.mini, 'zod/mini');
    const full = await schemaBundleBytes(schema.full, 'zod');
    console.log(`| ${name} | ${kib(mini)} KiB | ${kib(full)} KiB |`);
  }
} finally {
  if (args.keep) console.log(`footprint: projects kept in ${work}`);
  else await rm(work, { recursive: true, force: true });
}
