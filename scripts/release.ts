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
 * - each staged manifest has its source's version (the build is not stale);
 * - for a real publish, for all four before any is published (so that one refused leaves none
 *   half-released): `npm whoami` on each registry, `npm view <name>@<version>` finding nothing,
 *   and provenance only where npm can sign it (else refused: add `--no-provenance`).
 * `npm run release --dry-run` (the flag given to npm, without `--`) is taken as a dry run.
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

const USAGE = `usage: npm run release -- [--dry-run] [--registry <url>] [--tag <dist-tag>] [--no-provenance] [--no-build] [--json]

  --dry-run        npm publish --dry-run of each package: nothing is uploaded
  --registry <url> publish there (default: npm's configured registry, e.g. after aws codeartifact login)
  --tag <tag>      the dist-tag (default: latest)
  --no-provenance  publish without provenance (a laptop, a private registry)
  --no-build       use the build in dist/packages/ instead of running npm run build
  --json           one JSON document on stdout`;

/** A command-line mistake: the usage is printed and the exit status is 2. */
class UsageError extends Error {}

interface Source {
  role: string;
  folder: string;
  name: string;
  version: string;
}

/** The checks that need no build: one version, its changelog headings, no changeset left over. */
async function checkSources(dryRun: boolean): Promise<{ version: string; sources: Source[] }> {
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
  return { version, sources };
}

/** The build is there and current: each staged manifest has its source's name and version. */
async function checkBuild(version: string, sources: Source[]): Promise<void> {
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
}

/** npm's output of a command, or a ReleaseError naming it. */
async function npm(args: string[], what: string): Promise<string> {
  const { stdout } = await exec('npm', args, { cwd: root, maxBuffer: 16 * 1024 * 1024 }).catch(
    (error: { stderr?: string; message: string }) => {
      throw new ReleaseError(`${what} failed: ${error.stderr?.trim() || error.message}`);
    },
  );
  return stdout;
}

/** Where each package goes: --registry, else npm's registry for its scope, else npm's default. */
async function registryOf(name: string, given: string | undefined): Promise<string> {
  if (given) return given;
  const scope = name.startsWith('@') ? name.split('/')[0] : undefined;
  const scoped = scope ? (await npm(['config', 'get', `${scope}:registry`], 'npm config get')).trim() : '';
  if (scoped && scoped !== 'undefined') return scoped;
  return (await npm(['config', 'get', 'registry'], 'npm config get')).trim();
}

/** npm can sign provenance only with a CI's OIDC token (GitHub Actions' id-token, GitLab's SIGSTORE_ID_TOKEN). */
function provenanceAvailable(env: NodeJS.ProcessEnv): boolean {
  return Boolean(env.ACTIONS_ID_TOKEN_REQUEST_URL || env.SIGSTORE_ID_TOKEN);
}

/**
 * Before a real publish, for every package: its registry takes our login and does not have this
 * version yet. Checked for all four first, so that one refused does not leave the others published.
 */
async function checkRegistries(
  version: string,
  sources: Source[],
  registries: Map<string, string>,
): Promise<void> {
  for (const registry of new Set(registries.values())) {
    await npm(['whoami', '--registry', registry], `npm whoami --registry ${registry} (are you logged in?)`);
  }
  for (const source of sources) {
    const registry = registries.get(source.name) as string;
    const found = await exec(
      'npm',
      ['view', `${source.name}@${version}`, 'version', '--registry', registry],
      {
        cwd: root,
      },
    ).then(
      ({ stdout }) => stdout.trim(),
      (error: { stderr?: string }) => {
        if (/E404|404 Not Found/.test(error.stderr ?? '')) return '';
        throw new ReleaseError(
          `npm view ${source.name}@${version} on ${registry} failed: ${error.stderr?.trim()}`,
        );
      },
    );
    if (found) {
      throw new ReleaseError(
        `${source.name}@${version} is already on ${registry}: nothing was published; let \`npx changeset version\` move the version`,
      );
    }
  }
}

async function main(): Promise<void> {
  let values: {
    'dry-run': boolean;
    registry?: string;
    tag?: string;
    'no-provenance': boolean;
    'no-build': boolean;
    json: boolean;
    help: boolean;
  };
  try {
    ({ values } = parseArgs({
      options: {
        'dry-run': { type: 'boolean', default: false },
        registry: { type: 'string' },
        tag: { type: 'string' },
        'no-provenance': { type: 'boolean', default: false },
        'no-build': { type: 'boolean', default: false },
        json: { type: 'boolean', default: false },
        help: { type: 'boolean', short: 'h', default: false },
      },
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const log = (line: string) => {
    if (!values.json) process.stdout.write(`${line}\n`);
  };
  // `npm run release --dry-run` (without `--`) gives the flag to npm, which passes it on as
  // npm_config_dry_run: every npm publish below would be a dry run while this script reported a
  // release. Taken as the dry run it was meant to be.
  const npmDryRun = process.env.npm_config_dry_run === 'true';
  if (npmDryRun && !values['dry-run']) {
    process.stderr.write('release: npm was given --dry-run (without `--` before it): running as a dry run\n');
  }
  const dryRun = values['dry-run'] || npmDryRun;
  const provenance = !values['no-provenance'];
  if (provenance && !provenanceAvailable(process.env)) {
    const message =
      'provenance is on (publishConfig.provenance) but npm has no OIDC token to sign it here (GitHub Actions with ' +
      'id-token: write, or GitLab): publish from .github/workflows/release.yml, or add --no-provenance';
    if (!dryRun) throw new ReleaseError(message);
    process.stderr.write(`release: warning: ${message}\n`);
  }

  const { version, sources } = await checkSources(dryRun);
  if (!values['no-build']) {
    log('release: npm run build');
    await exec(process.execPath, [join(root, 'scripts', 'build.ts')], {
      cwd: root,
      maxBuffer: 16 * 1024 * 1024,
    });
  }
  await checkBuild(version, sources);
  const registries = new Map<string, string>();
  for (const source of sources) registries.set(source.name, await registryOf(source.name, values.registry));
  const targets = [...new Set(registries.values())].join(', ');
  if (dryRun) {
    log(
      `release: dry run of version ${version} for ${targets} (the login, the registry and whether the version is already there are checked by the real run, for all four before any is published)`,
    );
  } else {
    await checkRegistries(version, sources, registries);
    log(`release: version ${version} to ${targets}`);
  }

  const published: ReleasedPackage[] = [];
  for (const source of sources) {
    const args = ['publish', join(root, 'dist', 'packages', source.role), '--json'];
    if (dryRun) args.push('--dry-run');
    args.push('--registry', registries.get(source.name) as string);
    if (values.tag) args.push('--tag', values.tag);
    if (!provenance) args.push('--provenance=false');
    const stdout = await npm(args, `npm publish of dist/packages/${source.role}`);
    // npm prints one object keyed by the package's name (`{ "<name>": { id, files, size, … } }`).
    const report = Object.values(
      JSON.parse(stdout.slice(stdout.indexOf('{'))) as Record<string, unknown>,
    )[0] as {
      name: string;
      version: string;
      files: { path: string }[];
      size: number;
    };
    const line: ReleasedPackage = {
      name: report.name,
      version: report.version,
      files: report.files.length,
      packedBytes: report.size,
    };
    published.push(line);
    const top = [...new Set(report.files.map((f) => f.path.split('/')[0]))].sort().join(', ');
    log(
      `release: ${dryRun ? 'would publish' : 'published'} ${line.name}@${line.version} to ${registries.get(source.name)}: ` +
        `${line.files} files (${top}), ${(line.packedBytes / 1000).toFixed(1)} kB packed`,
    );
  }
  if (values.json) {
    process.stdout.write(
      `${JSON.stringify({ dryRun, version, registries: Object.fromEntries(registries), packages: published })}\n`,
    );
  }
}

main().catch((error: unknown) => {
  if (error instanceof UsageError) {
    process.stderr.write(`release: ${error.message}\n${USAGE}\n`);
    process.exitCode = 2;
    return;
  }
  process.stderr.write(`release: ${error instanceof ReleaseError ? error.message : String(error)}\n`);
  process.exitCode = 1;
});
