/**
 * As root, the embedded Postgres runs as the `postgres` system user, which must be able to reach its
 * binaries, its data directory and its temporary files; a checkout under `/root` (0700) hides them.
 */
import { existsSync, statSync } from 'node:fs';
import { dirname, parse } from 'node:path';

/** True when `dir` and every directory above it that exists let others through (o+x). */
export function searchableByOthers(dir: string): boolean {
  for (let d = dir; ; d = dirname(d)) {
    if (existsSync(d) && (statSync(d).mode & 0o001) === 0) return false;
    if (d === parse(d).root) return true;
  }
}
