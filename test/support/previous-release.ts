/**
 * The previous release's source tree, beside this one, for the tests that run both on one database
 * (test/versions/). A deploy runs them side by side: a Lambda of the previous version keeps
 * consuming until its last invocation ends, and a rollback runs it again on the new schema.
 *
 * The tree is `git archive` of a pinned commit, extracted once into
 * node_modules/.cache/outbox-previous/<commit> (kept between runs), with a symlink to the
 * repository's node_modules so that it runs without an install of its own.
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
  const dir = join(cache, commit);
  if (existsSync(join(dir, '.complete'))) return dir;
  // Extracted beside it, then renamed: a test file running at the same time never sees half a tree.
  const partial = `${dir}.${process.pid}.partial`;
  rmSync(partial, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  const archive = execFileSync(
    'git',
    ['archive', '--format=tar', commit, 'shared', 'migrations', 'package.json'],
    {
      cwd: root,
      maxBuffer: 256 * 1024 * 1024,
    },
  );
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
