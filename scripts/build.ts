/**
 * `npm run build`: the packages as they are published, one per role, each ready for `npm pack`
 * in `dist/packages/<role>/` (each role's folder holds its manifest beside its code: see ROLE_FOLDERS):
 *
 * | role | package | what it needs installed |
 * |---|---|---|
 * | producer | `outbox-relay-aws` | nothing: `postgres`, `pg`, Drizzle, Kysely, zod are the service's own (optional peers) |
 * | consumer | `@outbox-relay-aws/consumer` | `postgres`, `zod` (zod/mini for its settings), the RDS signer (IAM tokens); for the `outbox-inbox` command, commander and the Lambda and SQS clients |
 * | relay | `@outbox-relay-aws/relay` | the `outbox` command, the relay core and the operations: the AWS SDK clients, node-pg-migrate, commander… |
 * | cdk | `@outbox-relay-aws/cdk` | `aws-cdk-lib` and `constructs` (peers); the Lambda bundles are inside it |
 *
 * Steps:
 * - `tsc -p tsconfig.build.json`: ESM JavaScript and .d.ts in dist/, module by module;
 * - dist/migrations: the SQL migrations, where the compiled migrate module looks for them;
 * - dist/lambda/<relay|monitor|migrate>/index.mjs: the handler bundles the OutboxRelay construct
 *   deploys from the installed package, built with esbuild using the construct's own bundling
 *   options, so a user's `cdk synth` needs neither esbuild nor Docker. The migrate bundle carries
 *   the migrations beside it, as its NodejsFunction build does;
 * - per package: the compiled modules its entry points reach (found by esbuild over the compiled
 *   JavaScript, and by following the .d.ts imports), copied at the same paths under dist/, so that
 *   every module's `import.meta.url` arithmetic (the migrations folder, the Lambda bundles) holds;
 *   and a manifest whose exports name the compiled files instead of the TypeScript sources. The
 *   platform modules a package reaches are copied into it (shared/platform is not published on its
 *   own). The build fails when a package's code or types import a package it does not declare:
 *   that is the check that keeps the producer free of the relay's dependencies.
 */
import { execFileSync } from 'node:child_process';
import { cp, mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { builtinModules } from 'node:module';
import { dirname, join, relative } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { HANDLER_ENTRIES, type HandlerName, OUTBOX_BUNDLING } from '../infra/bundling.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = join(root, 'dist');

/** Each published package's folder: its manifest beside its code. */
const ROLE_FOLDERS = {
  producer: 'shared/producer',
  consumer: 'shared/consumer',
  relay: 'shared/relay',
  cdk: 'infra',
} as const;
type Role = keyof typeof ROLE_FOLDERS;
const ROLES = Object.keys(ROLE_FOLDERS) as Role[];

/** What a package carries beyond its exports' modules (paths relative to the repository). */
const EXTRAS: Partial<Record<Role, { entries?: string[]; copy?: string[]; bin?: Record<string, string> }>> = {
  // shared/relay/bin/outbox.js runs dist/cli/main.js when the TypeScript sources are absent, as in the package.
  // lambda-child.ts is forked, not imported, by `outbox bus --deliver`'s Lambda runtime.
  relay: {
    entries: ['shared/relay/cli/main.ts', 'shared/local/lambda-runtime/lambda-child.ts'],
    copy: ['dist/migrations', 'shared/relay/bin/outbox.js', 'scripts/check-node.cjs'],
    bin: { outbox: 'shared/relay/bin/outbox.js' },
  },
  // shared/consumer/bin/outbox-inbox.js likewise runs dist/shared/consumer/cli/main.js.
  consumer: {
    entries: ['shared/consumer/cli/main.ts'],
    copy: ['shared/consumer/bin/outbox-inbox.js', 'scripts/check-node.cjs'],
    bin: { 'outbox-inbox': 'shared/consumer/bin/outbox-inbox.js' },
  },
  cdk: { copy: ['dist/lambda'] },
};

interface Manifest {
  name: string;
  description?: string;
  exports: Record<string, string | Record<string, string>>;
  dependencies?: Record<string, string>;
  peerDependencies?: Record<string, string>;
  [key: string]: unknown;
}

/** The folder `npm pack` packs for a role. */
function stageDir(role: Role): string {
  return join(dist, 'packages', role);
}

const builtins = new Set(builtinModules);
const packageOf = (specifier: string) =>
  specifier
    .split('/')
    .slice(0, specifier.startsWith('@') ? 2 : 1)
    .join('/');
const isBuiltin = (specifier: string) => specifier.startsWith('node:') || builtins.has(packageOf(specifier));

/** The compiled modules reachable from `entries` (dist-relative .js), and the packages they import. */
async function runtimeGraph(entries: string[]): Promise<{ files: string[]; packages: Set<string> }> {
  const result = await build({
    entryPoints: entries.map((e) => join(dist, e)),
    bundle: true,
    platform: 'node',
    format: 'esm',
    packages: 'external',
    write: false,
    metafile: true,
    outdir: join(dist, '.graph'),
    logLevel: 'warning',
  });
  const files: string[] = [];
  const packages = new Set<string>();
  for (const [input, { imports }] of Object.entries(result.metafile.inputs)) {
    files.push(relative(dist, join(root, input)));
    for (const i of imports) if (i.external && !isBuiltin(i.path)) packages.add(packageOf(i.path));
  }
  return { files, packages };
}

/** The declaration files reachable from `entries` (dist-relative .d.ts), and the packages they name. */
async function typeGraph(entries: string[]): Promise<{ files: string[]; packages: Set<string> }> {
  const seen = new Set<string>();
  const packages = new Set<string>();
  const queue = [...entries];
  while (queue.length > 0) {
    const file = queue.pop() as string;
    if (seen.has(file)) continue;
    seen.add(file);
    // Comments first: TSDoc examples quote imports (`import { enqueue } from 'outbox-relay-aws/pg'`).
    const text = (await readFile(join(dist, file), 'utf8'))
      .replace(/\/\*[\s\S]*?\*\//g, '')
      .replace(/^\s*\/\/.*$/gm, '');
    for (const [, , specifier] of text.matchAll(
      /(?:\bfrom\s*|\bimport\s*\(\s*|^import\s+)(['"])([^'"]+)\1/gm,
    )) {
      if (!specifier) continue;
      if (specifier.startsWith('.')) {
        queue.push(join(dirname(file), specifier.replace(/\.(ts|js)$/, '.d.ts')));
      } else if (!isBuiltin(specifier)) {
        packages.add(packageOf(specifier));
      }
    }
  }
  return { files: [...seen], packages };
}

async function stagePackage(role: Role): Promise<void> {
  const folder = join(root, ROLE_FOLDERS[role]);
  const manifest = JSON.parse(await readFile(join(folder, 'package.json'), 'utf8')) as Manifest;
  const extras = EXTRAS[role] ?? {};
  const exportsMap: Manifest['exports'] = {};
  const jsEntries: string[] = [];
  const typeEntries: string[] = [];
  for (const [key, target] of Object.entries(manifest.exports)) {
    if (key === './package.json') {
      exportsMap[key] = './package.json';
      continue;
    }
    const source = relative(root, join(folder, target as string));
    const js = source.replace(/\.ts$/, '.js');
    const types = source.replace(/\.ts$/, '.d.ts');
    exportsMap[key] = { types: `./dist/${types}`, default: `./dist/${js}` };
    jsEntries.push(js);
    typeEntries.push(types);
  }
  for (const entry of extras.entries ?? []) jsEntries.push(entry.replace(/\.ts$/, '.js'));

  const code = await runtimeGraph(jsEntries);
  const types = await typeGraph(typeEntries);
  const declared = new Set([
    ...Object.keys(manifest.dependencies ?? {}),
    ...Object.keys(manifest.peerDependencies ?? {}),
  ]);
  const undeclared = [
    ...[...code.packages].filter((p) => !declared.has(p)).map((p) => `${p} (imported by its code)`),
    ...[...types.packages]
      .filter((p) => !declared.has(p) && !declared.has(`@types/${p}`))
      .map((p) => `${p} (named by its types)`),
  ];
  if (undeclared.length > 0) {
    throw new Error(`${manifest.name} (${ROLE_FOLDERS[role]}) does not declare: ${undeclared.join(', ')}`);
  }

  const stage = stageDir(role);
  await rm(stage, { recursive: true, force: true });
  for (const file of [...code.files, ...types.files]) {
    await mkdir(dirname(join(stage, 'dist', file)), { recursive: true });
    await cp(join(dist, file), join(stage, 'dist', file));
  }
  for (const path of extras.copy ?? []) await cp(join(root, path), join(stage, path), { recursive: true });

  // The license (the repository's) and the package's own changelog, which `npx changeset version`
  // writes in the role's folder: npm shows both on the package's page.
  await cp(join(root, 'LICENSE'), join(stage, 'LICENSE'));
  await cp(join(folder, 'CHANGELOG.md'), join(stage, 'CHANGELOG.md'));
  const topLevel = new Set([
    'dist',
    ...(extras.copy ?? []).map((p) => p.split('/')[0] as string),
    'CHANGELOG.md',
  ]);
  // Without the workspace's `prepack`, which refuses to pack the source entries.
  const { scripts: _workspaceOnly, ...publishable } = manifest;
  const published: Manifest = {
    ...publishable,
    exports: exportsMap,
    ...(typeof exportsMap['.'] === 'object' ? { types: exportsMap['.'].types } : {}),
    files: [...topLevel],
    ...(extras.bin ? { bin: extras.bin } : {}),
  };
  await writeFile(join(stage, 'package.json'), `${JSON.stringify(published, null, 2)}\n`);
  // The package's own README (what it is, install, an example, links to the docs), in its role's folder.
  await cp(join(folder, 'README.md'), join(stage, 'README.md'));
  console.log(
    `build: dist/packages/${role} ${manifest.name}: ${code.files.length} modules, ${types.files.length} declaration files, ` +
      `imports ${[...code.packages].sort().join(', ') || 'no package'}`,
  );
}

await rm(dist, { recursive: true, force: true });
// By path: `node scripts/build.ts` (npm run footprint, the package test) runs without npm's PATH.
execFileSync(join(root, 'node_modules', '.bin', 'tsc'), ['-p', join(root, 'tsconfig.build.json')], {
  stdio: 'inherit',
  cwd: root,
});
await cp(join(root, 'migrations'), join(dist, 'migrations'), { recursive: true });

for (const [name, entry] of Object.entries(HANDLER_ENTRIES) as [HandlerName, string][]) {
  const outdir = join(dist, 'lambda', name);
  await build({
    entryPoints: [join(root, entry)],
    outfile: join(outdir, 'index.mjs'),
    bundle: true,
    platform: 'node',
    format: 'esm',
    mainFields: ['module', 'main'],
    target: OUTBOX_BUNDLING.target,
    minify: OUTBOX_BUNDLING.minify,
    keepNames: OUTBOX_BUNDLING.keepNames,
    // A source map only when OUTBOX_BUNDLING asks for one (by default it does not, see its TSDoc),
    // and then without the sources, to keep the package small.
    sourcemap: OUTBOX_BUNDLING.sourceMap,
    sourcesContent: false,
    external: [...(OUTBOX_BUNDLING.externalModules ?? [])],
    banner: OUTBOX_BUNDLING.banner ? { js: OUTBOX_BUNDLING.banner } : {},
    logLevel: 'warning',
  });
  if (name === 'migrate') await cp(join(root, 'migrations'), join(outdir, 'migrations'), { recursive: true });
  const size = (await stat(join(outdir, 'index.mjs'))).size;
  console.log(`build: dist/lambda/${name}/index.mjs ${(size / 1024).toFixed(0)} KiB`);
}

for (const role of ROLES) await stagePackage(role);
