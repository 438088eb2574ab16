/**
 * The release setup (CONTRIBUTING.md#releasing): changesets' fixed group holds exactly the
 * published packages, which share one version, each with a changelog entry for it, provenance and
 * public access in its publishConfig, and a repository pointing at its folder; the repository's
 * license is the one the manifests name. The dry run of `npm publish` itself is in package.test.ts,
 * after the build.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const repo = fileURLToPath(new URL('../..', import.meta.url));

interface Manifest {
  name: string;
  version: string;
  private?: boolean;
  license: string;
  publishConfig?: Record<string, unknown>;
  repository?: { type: string; url: string; directory: string };
}

async function workspaces(): Promise<{ folder: string; manifest: Manifest }[]> {
  const root = JSON.parse(await readFile(join(repo, 'package.json'), 'utf8')) as { workspaces: string[] };
  return Promise.all(
    root.workspaces.map(async (folder) => ({
      folder,
      manifest: JSON.parse(await readFile(join(repo, folder, 'package.json'), 'utf8')) as Manifest,
    })),
  );
}

describe('release setup', () => {
  it('changesets releases every published package in one fixed group, and no private one', async () => {
    const config = JSON.parse(await readFile(join(repo, '.changeset', 'config.json'), 'utf8')) as {
      fixed: string[][];
      access: string;
      baseBranch: string;
    };
    const published = (await workspaces()).filter((w) => !w.manifest.private).map((w) => w.manifest.name);
    expect(published).toHaveLength(4);
    expect(config.fixed).toHaveLength(1);
    expect([...(config.fixed[0] ?? [])].sort()).toEqual([...published].sort());
    expect(config.access).toBe('public');
    expect(config.baseBranch).toBe('main');
  });

  it('the published packages share one version, each with its changelog entry, provenance and its folder as repository', async () => {
    const published = (await workspaces()).filter((w) => !w.manifest.private);
    const versions = new Set(published.map((w) => w.manifest.version));
    expect(versions.size).toBe(1);
    for (const { folder, manifest } of published) {
      const changelog = await readFile(join(repo, folder, 'CHANGELOG.md'), 'utf8');
      expect(changelog.startsWith(`# ${manifest.name}\n`), `${folder}/CHANGELOG.md's title`).toBe(true);
      expect(changelog.split('\n'), `${folder}/CHANGELOG.md`).toContain(`## ${manifest.version}`);
      expect(manifest.publishConfig).toEqual({ access: 'public', provenance: true });
      expect(manifest.repository).toEqual({
        type: 'git',
        url: 'git+https://github.com/outbox-relay-aws/outbox-relay-aws.git',
        directory: folder,
      });
      expect(manifest.license).toBe('Apache-2.0');
    }
  });

  it('the repository carries the Apache-2.0 license text, and no changeset is malformed', async () => {
    const license = await readFile(join(repo, 'LICENSE'), 'utf8');
    expect(license).toContain('Apache License');
    expect(license).toContain('Version 2.0, January 2004');
    const names = new Set((await workspaces()).map((w) => w.manifest.name));
    for (const file of (await readdir(join(repo, '.changeset'))).filter(
      (f) => f.endsWith('.md') && f !== 'README.md',
    )) {
      // A changeset: front matter naming published packages and a bump, then the summary.
      const text = await readFile(join(repo, '.changeset', file), 'utf8');
      const [, front = ''] = text.match(/^---\n([\s\S]*?)\n---\n/) ?? [];
      expect(front, `.changeset/${file}'s front matter`).not.toBe('');
      for (const line of front.split('\n')) {
        const [, name = '', bump = ''] = line.match(/^"([^"]+)": (patch|minor|major)$/) ?? [];
        expect(names.has(name), `.changeset/${file}: ${line}`).toBe(true);
        expect(['patch', 'minor', 'major']).toContain(bump);
      }
    }
  });
});

describe("each published package's README (what npm shows)", () => {
  const REPO_URL = 'https://github.com/outbox-relay-aws/outbox-relay-aws';
  /** GitHub's anchor of a heading: lower case, spaces to hyphens, punctuation dropped. */
  const slug = (heading: string) =>
    heading
      .toLowerCase()
      .replace(/[^\p{L}\p{N} _-]/gu, '')
      .replace(/ /g, '-');

  it('says what it is, how to install it, shows an example and links to pages of the docs that exist', async () => {
    for (const { folder, manifest } of (await workspaces()).filter((w) => !w.manifest.private)) {
      const readme = await readFile(join(repo, folder, 'README.md'), 'utf8');
      expect(readme.startsWith(`# ${manifest.name}\n`), folder).toBe(true);
      expect(readme, folder).toMatch(new RegExp(`npm install [^\\n]*${manifest.name.replace('/', '\\/')}`));
      // The install command's block and an example's.
      expect((readme.match(/^```/gm) ?? []).length, folder).toBeGreaterThanOrEqual(4);
      const links = [...readme.matchAll(/\]\((https:[^)]+)\)/g)].map((m) => m[1] as string);
      expect(links.filter((l) => l.includes('/docs/')).length, folder).toBeGreaterThanOrEqual(3);
      for (const link of links) {
        expect(link.startsWith(REPO_URL), link).toBe(true);
        const [path = '', anchor] = link
          .slice(REPO_URL.length)
          .replace(/^\/blob\/main\//, '')
          .split('#');
        const file = path === '' ? 'README.md' : path;
        const text = await readFile(join(repo, file), 'utf8');
        if (anchor && anchor !== 'readme') {
          const anchors = [...text.matchAll(/^#+ (.*)$/gm)].map((m) => slug(m[1] as string));
          expect(anchors, link).toContain(anchor);
        }
      }
    }
  });
});
