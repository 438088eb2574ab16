/**
 * `npm run release -- [--dry-run] [--registry <url>] [--tag <dist-tag>] [--no-provenance] [--no-build] [--json]`:
 * publishes the four packages (producer `outbox-relay-aws`, `@outbox-relay-aws/consumer`,
 * `@outbox-relay-aws/relay`, `@outbox-relay-aws/cdk`) as `npm run build` stages them in
 * `dist/packages/<role>/` — never the role folders, whose manifests export TypeScript sources
 * (their `prepack` refuses). How a release is cut: CONTRIBUTING.md#releasing.
 *
 * Before it publishes anything it checks, and stops naming what to do:
 * - the four versions are one (changesets' `fixed` group, .changeset/config.json, moves them
 *   together; a hand-edited manifest would break it);
 * - each package's CHANGELOG.md has a `## <version>` heading (`npx changeset version` writes it);
 * - no changeset is waiting in .changeset/ (one that is would be left out of this version; with
 *   `--dry-run` this is a warning: CI dry-runs with changesets pending);
 * - each staged manifest has its source's version (the build is not stale).
 *
 * Then it runs `npm publish <folder> --json` for each package (none depends on another, so the order
 * does not matter) and prints a line per package: name@version, files, packed size in kB.
 * `--dry-run` is npm's: npm packs and checks each package and uploads nothing. `--registry` and
 * `--tag` go to npm unchanged; without `--registry` npm's configured one is used (after
 * `aws codeartifact login --tool npm`, CodeArtifact's). Provenance is on in each manifest's
 * `publishConfig`: npm can sign it only inside a CI that gives it an OIDC token (GitHub Actions
 * with `id-token: write`, GitLab); `--no-provenance` publishes without it (a private registry,
 * a laptop). Exits 1 on the first failure, with npm's message.
 */
import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';

const exec = promisify(execFile);
const root = fileURLToPath(new URL('..', import.meta.url));

/** Each published package's role (its folder in dist/packages/) and source folder. */
const RELEASED = [
  { role: 'producer', folder: 'shared/producer' },
  { role: 'consumer', folder: 'shared/consumer' },
  { role: 'relay', folder: 'shared/relay' },
  { role: 'cdk', folder: 'infra' },
] as const;

/** One package's outcome, as `--json` prints it. */
interface ReleasedPackage {
  name: string;
  version: string;
  /** Files in the tarball. */
  files: number;
  /** The tarball's size, bytes. */
  packedBytes: number;
}

class ReleaseError extends Error {}

async function manifestOf(path: string): Promise<{ name: string; version: string }> {
  return JSON.parse(await readFile(join(path, 'package.json'), 'utf8'));
}

/** The changesets waiting in .changeset/ (every Markdown file but its README). */
async function pendingChangesets(): Promise<string[]> {
  const files = await readdir(join(root, '.changeset'));
  return files.filter((f) => f.endsWith('.md') && f !== 'README.md');
}

async function check(dryRun: boolean): Promise<string> {
  const sources = await Promise.all(
    RELEASED.map(async (p) => ({ ...p, ...(await manifestOf(join(root, p.folder))) })),
  );
  const versions = new Set(sources.map((s) => s.version));
  if (versions.size !== 1) {
    throw new ReleaseError(
      `the packages' versions differ (${sources.map((s) => `${s.name}@${s.version}`).join(', ')}): ` +
        'they are released together; let `npx changeset version` set them',
    );
  }
  const [version] = [...versions] as [string];
  for (const source of sources) {
    const changelog = await readFile(join(root, source.folder, 'CHANGELOG.md'), 'utf8').catch(() => '');
    if (!changelog.split('\n').includes(`## ${version}`)) {
      throw new ReleaseError(
        `${source.folder}/CHANGELOG.md has no "## ${version}" heading: run \`npx changeset version\``,
      );
    }
  }
  const pending = await pendingChangesets();
  if (pending.length > 0) {
    const message = `${pending.length} changeset(s) not yet in a version (${pending.join(', ')}): run \`npx changeset version\``;
    if (!dryRun) throw new ReleaseError(message);
    process.stderr.write(`release: warning: ${message}\n`);
  }
  for (const source of sources) {
    const staged = join(root, 'dist', 'packages', source.role);
    if (!existsSync(join(staged, 'package.json'))) {
      throw new ReleaseError(
        `dist/packages/${source.role} is missing: run \`npm run build\` (or drop --no-build)`,
      );
    }
    const built = await manifestOf(staged);
    if (built.name !== source.name || built.version !== version) {
      throw new ReleaseError(
        `dist/packages/${source.role} holds ${built.name}@${built.version}, not ${source.name}@${version}: ` +
          'the build is stale, run `npm run build`',
      );
    }
  }
  return version;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      'dry-run': { type: 'boolean', default: false },
      registry: { type: 'string' },
      tag: { type: 'string' },
      'no-provenance': { type: 'boolean', default: false },
      'no-build': { type: 'boolean', default: false },
      json: { type: 'boolean', default: false },
    },
  });
  const dryRun = values['dry-run'];
  const log = (line: string) => {
    if (!values.json) process.stdout.write(`${line}\n`);
  };
  if (!values['no-build']) {
    log('release: npm run build');
    await exec(process.execPath, [join(root, 'scripts', 'build.ts')], {
      cwd: root,
      maxBuffer: 16 * 1024 * 1024,
    });
  }
  const version = await check(dryRun);
  log(
    `release: ${dryRun ? 'dry run of ' : ''}version ${version}${values.registry ? ` to ${values.registry}` : ''}`,
  );
  const published: ReleasedPackage[] = [];
  for (const { role } of RELEASED) {
    const args = ['publish', join(root, 'dist', 'packages', role), '--json'];
    if (dryRun) args.push('--dry-run');
    if (values.registry) args.push('--registry', values.registry);
    if (values.tag) args.push('--tag', values.tag);
    if (values['no-provenance']) args.push('--provenance=false');
    const { stdout } = await exec('npm', args, { cwd: root, maxBuffer: 16 * 1024 * 1024 }).catch(
      (error: { stderr?: string; message: string }) => {
        throw new ReleaseError(
          `npm publish of dist/packages/${role} failed: ${error.stderr?.trim() || error.message}`,
        );
      },
    );
    // npm prints one object keyed by the package's name (`{ "<name>": { id, files, size, … } }`).
    const report = Object.values(
      JSON.parse(stdout.slice(stdout.indexOf('{'))) as Record<string, unknown>,
    )[0] as {
      name: string;
      version: string;
      files: unknown[];
      size: number;
    };
    const line: ReleasedPackage = {
      name: report.name,
      version: report.version,
      files: report.files.length,
      packedBytes: report.size,
    };
    published.push(line);
    log(
      `release: ${dryRun ? 'would publish' : 'published'} ${line.name}@${line.version}: ` +
        `${line.files} files, ${(line.packedBytes / 1000).toFixed(1)} kB packed`,
    );
  }
  if (values.json) process.stdout.write(`${JSON.stringify({ dryRun, version, packages: published })}\n`);
}

main().catch((error: unknown) => {
  process.stderr.write(`release: ${error instanceof ReleaseError ? error.message : String(error)}\n`);
  process.exitCode = 1;
});
