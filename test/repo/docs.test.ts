/**
 * The docs as a reader meets them (README.md, CONTRIBUTING.md, every page under docs/): every
 * relative link leads to a file that exists, every `#anchor` to a heading of the page it names
 * (slugged the way GitHub slugs headings) and not to a section that moved, every page directly
 * under docs/ is listed in the README's table of the docs and every page below it
 * (docs/investigations/) is reachable from there by links, no page is over 32 KB, and every ```ts
 * block type-checks against this checkout's source, importing the package by its name as a user
 * does.
 *
 * The blocks are written to a temporary directory in the checkout (`.docs-check-*`, removed after)
 * and compiled by one `tsc` run (TypeScript 7 is a native compiler with no JavaScript API), with a
 * tsconfig that extends the repository's and maps each of the package's entry points
 * (package.json "exports", pointed from dist/ back at the source); an error is reported at its
 * page and line. Two markers, an HTML comment on the line before a block:
 * - `<!-- file: examples/consumer/handler.ts -->`: the block is that file, character for character
 *   (checked); the file itself is compiled, so its relative imports resolve;
 * - `<!-- fragment -->`: not compiled (a few lines out of a larger whole; keep these rare).
 *
 * And the repository's own documents stand alone: no comment, test or doc points a reader at a
 * file the repository does not ship (the product brief the project was designed from lives outside
 * it, and so do its numbered guarantees).
 */
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));

/** The pages checked, relative to the repository root: docs/ and its folders (docs/investigations/). */
const pages = [
  'README.md',
  'CONTRIBUTING.md',
  ...readdirSync(join(root, 'docs'), { recursive: true, encoding: 'utf8' })
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f.split(sep).join('/')}`)
    .sort(),
];

/** A page a reader can take in one sitting; the issue that split the long pages set the bound. */
const MAX_PAGE_BYTES = 32 * 1024;

interface CodeBlock {
  page: string;
  /** 1-based line of the block's first line of code. */
  line: number;
  lang: string;
  code: string;
  /** The `<!-- … -->` marker on the line before the fence, if any. */
  marker: string | undefined;
}

interface Page {
  path: string;
  /** The text with fenced blocks blanked out (line numbers kept). */
  prose: string;
  blocks: CodeBlock[];
  headings: string[];
}

function readPage(path: string): Page {
  const lines = readFileSync(join(root, path), 'utf8').split('\n');
  const prose: string[] = [];
  const blocks: CodeBlock[] = [];
  let open: { fence: string; lang: string; start: number; marker: string | undefined } | undefined;
  let body: string[] = [];
  lines.forEach((line, i) => {
    if (open) {
      if (line.trimStart().startsWith(open.fence) && line.trim() === open.fence) {
        blocks.push({
          page: path,
          line: open.start + 1,
          lang: open.lang,
          code: body.join('\n'),
          marker: open.marker,
        });
        open = undefined;
      } else {
        body.push(line);
      }
      prose.push('');
      return;
    }
    const fence = /^(\s*)(`{3,}|~{3,})\s*([\w-]*)/.exec(line);
    if (fence) {
      const previous = lines[i - 1]?.trim() ?? '';
      const marker = /^<!--\s*(.*?)\s*-->$/.exec(previous)?.[1];
      open = { fence: fence[2] as string, lang: fence[3] ?? '', start: i + 1, marker };
      body = [];
      prose.push('');
      return;
    }
    prose.push(line);
  });
  // Blocks indented under a list item: drop the indentation the item gave them.
  for (const block of blocks) {
    const indents = block.code
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => /^ */.exec(l)?.[0].length ?? 0);
    const common = Math.min(...indents);
    if (common > 0 && Number.isFinite(common)) {
      block.code = block.code
        .split('\n')
        .map((l) => l.slice(common))
        .join('\n');
    }
  }
  const headings = prose.flatMap((l) => {
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(l);
    return m ? [m[1] as string] : [];
  });
  return { path, prose: prose.join('\n'), blocks, headings };
}

/** A heading's anchor as GitHub makes it (github-slugger): rendered text, lower case, punctuation and symbols dropped, spaces to hyphens. */
function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1') // links and images: their text
    .split(/(`[^`]*`)/)
    .map(
      (part, i) =>
        i % 2 === 1
          ? part.slice(1, -1) // a code span: its content, as written
          : part.replace(/<[^>]+>/g, '').replace(/\*\*|\*/g, ''), // inline HTML and emphasis: not text
    )
    .join('');
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc} -]/gu, '')
    .replace(/ /g, '-');
}

/** Every anchor a page has, duplicates numbered `-1`, `-2`… as GitHub numbers them. */
function anchorsOf(page: Page): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const heading of page.headings) {
    const base = slug(heading);
    const n = seen.get(base) ?? 0;
    anchors.add(n === 0 ? base : `${base}-${n}`);
    seen.set(base, n + 1);
  }
  return anchors;
}

interface Link {
  page: string;
  line: number;
  target: string;
}

function linksOf(page: Page): Link[] {
  // Code spans are not links; blank them, keeping offsets for line numbers.
  const text = page.prose.replace(/`[^`\n]*`/g, (s) => ' '.repeat(s.length));
  const links: Link[] = [];
  for (const m of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
    const line = text.slice(0, m.index).split('\n').length;
    links.push({ page: page.path, line, target: m[1] as string });
  }
  for (const m of text.matchAll(/<(?:a|img)\s[^>]*(?:href|src)="([^"]+)"/g)) {
    const line = text.slice(0, m.index).split('\n').length;
    links.push({ page: page.path, line, target: m[1] as string });
  }
  return links;
}

const parsed = new Map(pages.map((p) => [p, readPage(p)]));

/** What is wrong with a link, or undefined when it resolves. */
function brokenLink(link: Link): string | undefined {
  const { target } = link;
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return undefined; // https:, mailto: — not checked here
  const [pathPart = '', anchor] = target.split('#', 2) as [string, string | undefined];
  const file =
    pathPart === '' ? link.page : relative(root, resolve(root, dirname(link.page), decodeURI(pathPart)));
  if (file.startsWith('..')) return `${target}: outside the repository`;
  if (!existsSync(join(root, file))) return `${target}: no such file (${file})`;
  if (anchor === undefined) return undefined;
  if (!file.endsWith('.md')) return `${target}: an anchor into a file that is not markdown`;
  const page = parsed.get(file) ?? readPage(file);
  if (!anchorsOf(page).has(decodeURIComponent(anchor))) {
    return `${target}: ${file} has no heading with the anchor #${anchor}`;
  }
  if (file !== link.page && movedAnchors(page).has(decodeURIComponent(anchor))) {
    return `${target}: that section moved; cite the page and anchor its pointer in ${file} names`;
  }
  return undefined;
}

/**
 * The anchors a split page keeps under "## Sections that moved" (docs/consuming.md): each old
 * section's heading with a pointer to its new page, so that a link from outside still lands.
 * Links and citations inside the repository go to the new place instead.
 */
function movedAnchors(page: Page): Set<string> {
  // anchorsOf keeps the headings' order (duplicates get their own -1, -2 anchors).
  const anchors = [...anchorsOf(page)];
  const levels = page.prose.split('\n').flatMap((l) => {
    const m = /^(#{1,6})\s/.exec(l);
    return m ? [(m[1] as string).length] : [];
  });
  const at = anchors.indexOf('sections-that-moved');
  if (at < 0) return new Set();
  const end = levels.findIndex((level, i) => i > at && level <= 2);
  return new Set(anchors.slice(at + 1, end < 0 ? undefined : end));
}

/** The pages a page links to (repository paths, anchors dropped), markdown pages only. */
function linkedPages(page: Page): string[] {
  return linksOf(page).flatMap((l) => {
    const [pathPart = ''] = l.target.split('#', 1);
    if (pathPart === '' || /^[a-z][a-z0-9+.-]*:/i.test(pathPart) || !pathPart.endsWith('.md')) return [];
    return [
      relative(root, resolve(root, dirname(page.path), decodeURI(pathPart)))
        .split(sep)
        .join('/'),
    ];
  });
}

describe('the docs', () => {
  it("has a page per task under docs/, each listed in the README's table of the docs", () => {
    const docs = pages.filter((p) => /^docs\/[^/]+\.md$/.test(p));
    expect(docs.length).toBeGreaterThanOrEqual(5);
    // The README's "Documentation" section, up to its next heading: the table a reader starts from.
    const readme = parsed.get('README.md') as Page;
    const lines = readme.prose.split('\n');
    const start = lines.findIndex((l) => /^##\s+Documentation\s*$/.test(l));
    expect(start, 'README.md has a "## Documentation" section').toBeGreaterThanOrEqual(0);
    const end = lines.findIndex((l, i) => i > start && /^#{1,2}\s/.test(l));
    const table = { ...readme, prose: lines.slice(start, end).join('\n') };
    const listed = new Set(linkedPages(table));
    expect(docs.filter((p) => !listed.has(p))).toEqual([]);
    expect(listed.has('CONTRIBUTING.md')).toBe(true);
  });

  it("has every page reachable by links from the README's table (the investigations through Performance)", () => {
    const reached = new Set<string>(['README.md']);
    const queue = ['README.md'];
    for (let page = queue.shift(); page !== undefined; page = queue.shift()) {
      const from = parsed.get(page);
      if (from === undefined) continue;
      for (const target of linkedPages(from)) {
        if (!reached.has(target)) {
          reached.add(target);
          queue.push(target);
        }
      }
    }
    expect(pages.filter((p) => p.startsWith('docs/') && !reached.has(p))).toEqual([]);
  });

  it('keeps every docs page at most 32 KB, short enough to read for one task', () => {
    const sizes = pages
      .filter((p) => p.startsWith('docs/'))
      .map((p) => ({ page: p, bytes: readFileSync(join(root, p)).length }));
    expect(sizes.length).toBeGreaterThanOrEqual(5);
    expect(sizes.filter((s) => s.bytes > MAX_PAGE_BYTES)).toEqual([]);
  });

  it('keeps the README short enough to read in five minutes (at most 30 KB)', () => {
    expect(readFileSync(join(root, 'README.md')).length).toBeLessThanOrEqual(30 * 1024);
  });

  it('links only to files that exist and to anchors their pages have', () => {
    const links = [...parsed.values()].flatMap(linksOf);
    expect(links.length).toBeGreaterThan(50);
    const broken = links.flatMap((l) => {
      const problem = brokenLink(l);
      return problem === undefined ? [] : [`${l.page}:${l.line}: ${problem}`];
    });
    expect(broken).toEqual([]);
  });

  it('slugs headings as GitHub does', () => {
    expect(slug('`enqueue(tx, event, options?)` → `Promise<EnqueueResult>`')).toBe(
      'enqueuetx-event-options--promiseenqueueresult',
    );
    expect(slug('Without a proxy: IAM straight to the instance or cluster')).toBe(
      'without-a-proxy-iam-straight-to-the-instance-or-cluster',
    );
    expect(slug('Batch size × PutEvents concurrency at 20 ms')).toBe(
      'batch-size--putevents-concurrency-at-20-ms',
    );
    expect(slug('`OUTBOX_DB_POOLER` and [a link](x.md)')).toBe('outbox_db_pooler-and-a-link');
  });

  it('shows example files exactly as they are', () => {
    const included = [...parsed.values()]
      .flatMap((p) => p.blocks)
      .filter((b) => b.marker?.startsWith('file:'));
    expect(included.length).toBeGreaterThan(0);
    for (const block of included) {
      const file = (block.marker as string).slice('file:'.length).trim();
      expect(block.code, `${block.page}:${block.line} shows ${file}`).toBe(
        readFileSync(join(root, file), 'utf8').trimEnd(),
      );
    }
  });

  it('has TypeScript blocks that type-check against the source', () => {
    const blocks = [...parsed.values()]
      .flatMap((p) => p.blocks)
      .filter((b) => /^(ts|typescript)$/.test(b.lang));
    const fragments = blocks.filter((b) => b.marker === 'fragment');
    // Fragments are the exception: a block a reader copies should compile.
    expect(fragments.length).toBeLessThanOrEqual(Math.ceil(blocks.length / 5));

    const dir = mkdtempSync(join(root, '.docs-check-'));
    try {
      const virtual = new Map<string, CodeBlock>();
      const included: string[] = [];
      blocks.forEach((block, n) => {
        if (block.marker === 'fragment') return;
        if (block.marker?.startsWith('file:')) {
          included.push(`../${block.marker.slice('file:'.length).trim()}`);
          return;
        }
        const name = `${block.page.replace(/\.md$/, '').replace(/\//g, '-')}.block-${n}.ts`;
        // Every block is a module of its own (top-level await, no clashes between blocks).
        const code = /^\s*(import|export)\s/m.test(block.code) ? block.code : `${block.code}\nexport {};`;
        writeFileSync(join(dir, name), `${code}\n`);
        virtual.set(name, block);
      });
      expect(virtual.size).toBeGreaterThan(10);

      // The packages' names (outbox-relay-aws, @outbox-relay-aws/consumer, …) resolve as a user's
      // would, through node_modules: the workspace links each to its role folder (shared/<role>, infra).
      writeFileSync(
        join(dir, 'tsconfig.json'),
        JSON.stringify({
          extends: '../tsconfig.json',
          compilerOptions: { noEmit: true },
          include: [],
          files: [...virtual.keys(), ...included],
        }),
      );
      // One compiler run for every block: the repository's TypeScript, its tsconfig.
      const tsc = spawnSync(
        process.execPath,
        [
          join(root, 'node_modules/typescript/bin/tsc'),
          '-p',
          join(dir, 'tsconfig.json'),
          '--pretty',
          'false',
        ],
        { cwd: root, encoding: 'utf8', timeout: 120_000 },
      );
      const output = `${tsc.stdout}${tsc.stderr}`;
      // `file(line,col): error TSnnnn: message`, located back in the page.
      const problems = output
        .split('\n')
        .filter((l) => l.trim() !== '' && !l.startsWith(' '))
        .map((l) => {
          const m = /^(?:.*[\\/])?([^\\/(]+)\((\d+),\d+\): (.*)$/.exec(l);
          const block = m ? virtual.get(m[1] as string) : undefined;
          return block && m ? `${block.page}:${block.line + Number(m[2]) - 1}: ${m[3]}` : l;
        });
      expect(problems).toEqual([]);
      expect(tsc.status).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

const SKIP = new Set(['node_modules', '.git', 'cdk.out', 'dist', '.pgdata', 'results']);
const TEXT = /\.(ts|js|cjs|mjs|json|md|sql|yml|yaml|sh)$|^run$/;

async function* files(dir: string): AsyncGenerator<string> {
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    // cdk.out.direct (CI's second synth) and the like: generated, as cdk.out is.
    if (SKIP.has(entry.name) || entry.name.startsWith('cdk.out') || entry.name.startsWith('.docs-check-'))
      continue;
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* files(path);
    else if (TEXT.test(entry.name) && entry.name !== 'package-lock.json') yield path;
  }
}

describe('repository documents', () => {
  it('cite the docs by a path and an anchor that exist (and not a section that moved)', async () => {
    const self = fileURLToPath(import.meta.url);
    const broken: string[] = [];
    let cited = 0;
    for await (const path of files(root)) {
      if (path === self || path.endsWith('.md')) continue;
      const lines = (await readFile(path, 'utf8')).split('\n');
      lines.forEach((line, i) => {
        for (const m of line.matchAll(/\b((?:docs\/[\w/-]+|README|CONTRIBUTING)\.md)(#[\w-]+)?/g)) {
          cited++;
          const problem = brokenLink({ page: 'README.md', line: i + 1, target: `${m[1]}${m[2] ?? ''}` });
          if (problem !== undefined) broken.push(`${relative(root, path)}:${i + 1}: ${problem}`);
        }
      });
    }
    expect(cited).toBeGreaterThan(20);
    expect(broken).toEqual([]);
  });

  it('cite the README by a section name it has (a database hint says: see the README, "…")', async () => {
    const self = fileURLToPath(import.meta.url);
    const readme = readPage('README.md');
    // A heading, or a paragraph's bold lead ("**Enqueue from SQL** …"), names a section.
    const sections = [
      ...readme.headings,
      ...[...readme.prose.matchAll(/^\*\*([^*]+)\*\*/gm)].map((m) => m[1] ?? ''),
    ];
    const missing: string[] = [];
    let cited = 0;
    for await (const path of files(root)) {
      if (path === self || path.endsWith('.md')) continue;
      const lines = (await readFile(path, 'utf8')).split('\n');
      lines.forEach((line, i) => {
        for (const m of line.matchAll(/\bREADME(?:'s|,)\s+"([^"]+)"/g)) {
          cited++;
          const name = (m[1] ?? '').replace(/[.,]$/, '');
          if (!sections.some((s) => s.includes(name)))
            missing.push(`${relative(root, path)}:${i + 1}: "${name}"`);
        }
      });
    }
    expect(cited).toBeGreaterThan(0);
    expect(missing).toEqual([]);
  });

  it('cite nothing outside the repository: no DESIGN.md, no numbered guarantee of a brief it does not ship', async () => {
    const self = fileURLToPath(import.meta.url);
    const offending: string[] = [];
    for await (const path of files(root)) {
      if (path === self) continue;
      const lines = (await readFile(path, 'utf8')).split('\n');
      lines.forEach((line, i) => {
        if (/DESIGN\.md|\bguarantee \d+\b/i.test(line)) offending.push(`${relative(root, path)}:${i + 1}`);
      });
    }
    expect(offending).toEqual([]);
  });
});
