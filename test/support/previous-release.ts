/**
 * The previous release's source tree, beside this one, for the tests that run both on one database
 * (test/versions/). A deploy runs them side by side: a Lambda of the previous version keeps
 * consuming until its last invocation ends, and a rollback runs it again on the new schema.
 *
 * The tree is `git archive` of a pinned commit (its `shared/`, `functions/`, `migrations/` and
 * `package.json`), extracted once into node_modules/.cache/outbox-previous/<commit>.<paths> (kept
 * between runs), with a symlink to the repository's node_modules so that it runs without an
 * install of its own.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, renameSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('../..', import.meta.url));

/**
 * The previous release. No release tag exists yet: the commit before migration 018 (the inbox's
 * chain per aggregate, the last change of the inbox's state a consumer reads), whose consumer keeps
 * a chain per source. When releases are tagged, a `v<version>` tag of the previous release replaces it.
 */
export const PREVIOUS_RELEASE = 'caad438';

/**
 * The previous releases whose relay and monitor run beside this one's (test/versions/mixed-relays):
 * - be16a94, the last commit before migration 024 (the outbox's move into schema `outbox`) whose
 *   schema this one upgrades: its relay and monitor name every table unqualified and find them
 *   through the role defaults `outbox migrate --roles` sets. (The commits after it, b4aaa48 to
 *   fc81a13, had migrations 026, 027 and 029 without 024: node-pg-migrate refuses to upgrade their
 *   databases, "Not run migration 024_outbox_schema is preceding already run migration 026"; they
 *   were never released.)
 * - d2ac790, the newest commit of main when the test was written, so that the next change is run
 *   beside the code it replaces.
 * At a release, the list becomes the previous release's tag (`v<version>`); keep the oldest release
 * still supported beside it while a migration's contract step waits for it. `OUTBOX_PREVIOUS_RELEASES`
 * (refs, comma-separated) runs the test against others for once.
 */
export const PREVIOUS_RELAY_RELEASES: readonly string[] = ['be16a94', 'd2ac790'];

/** {@link PREVIOUS_RELAY_RELEASES}, or the refs of `OUTBOX_PREVIOUS_RELEASES` when it is set. */
export function previousRelayReleases(env: NodeJS.ProcessEnv = process.env): string[] {
  const refs = (env.OUTBOX_PREVIOUS_RELEASES ?? '')
    .split(',')
    .map((r) => r.trim())
    .filter((r) => r !== '');
  return refs.length > 0 ? refs : [...PREVIOUS_RELAY_RELEASES];
}

/** What is extracted of the previous release: the packages' code, the functions and the migrations. */
const PATHS = ['shared', 'functions', 'migrations', 'package.json'];

function git(args: string[]): string {
  return execFileSync('git', args, { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] }).trim();
}

/**
 * The previous release's tree, extracted when missing.
 * @returns the directory holding it (import its modules by path)
 * @throws when the commit is not in this clone (a shallow clone), saying how to fetch it
 */
export function previousRelease(ref: string = PREVIOUS_RELEASE): string {
  let commit: string;
  try {
    commit = git(['rev-parse', '--verify', '--quiet', `${ref}^{commit}`]);
  } catch {
    throw new Error(
      `the previous release (${ref}) is not in this clone: the versions tests run its code beside this one. ` +
        'Fetch the full history (git fetch --unshallow, or clone without --depth) and run again.',
    );
  }
  const cache = join(root, 'node_modules', '.cache', 'outbox-previous');
  // The paths are in the name: a tree extracted with fewer (before `functions/`) is not reused.
  const dir = join(cache, `${commit}.${PATHS.length}`);
  if (existsSync(join(dir, '.complete'))) return dir;
  // Extracted beside it, then renamed: a test file running at the same time never sees half a tree.
  const partial = `${dir}.${process.pid}.partial`;
  rmSync(partial, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  const archive = execFileSync('git', ['archive', '--format=tar', commit, ...PATHS], {
    cwd: root,
    maxBuffer: 256 * 1024 * 1024,
  });
  execFileSync('tar', ['-x', '-C', partial], { input: archive });
  symlinkSync(join(root, 'node_modules'), join(partial, 'node_modules'), 'dir');
  writeFileSync(join(partial, '.complete'), `${commit}\n`);
  try {
    renameSync(partial, dir);
  } catch (error) {
    // Another test process extracted it first: use theirs.
    rmSync(partial, { recursive: true, force: true });
    if (!existsSync(join(dir, '.complete'))) throw error;
  }
  return dir;
}
