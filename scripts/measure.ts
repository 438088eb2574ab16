/**
 * Measures of what the packages cost a service (issue 21), used by `npm run footprint` (which
 * prints them) and by the tests that hold them to the issue's bounds (test/repo/packages.test.ts,
 * test/repo/package.test.ts):
 * - the consumer's Lambda bundle as a service would build it: esbuild, bundled, minified, ESM for
 *   Node 24, from the example handlers (examples/), whose imports name the packages as a user's do;
 * - an installed node_modules: its packages and its size;
 * - an import: which packages it loads, and the process's RSS after it.
 */
import { readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { type BuildOptions, build } from 'esbuild';

const root = fileURLToPath(new URL('..', import.meta.url));

/** The example consumer handlers, repository-relative. */
export const CONSUMER_EXAMPLES = ['examples/consumer/handler.ts', 'examples/billing/handler.ts'] as const;

/** One bundle's size and what went into it. */
export interface BundleSize {
  /** Minified bundle, bytes. */
  bytes: number;
  /** Bytes of input per package (node_modules name) or repository folder, before minifying. */
  inputs: Record<string, number>;
}

/** esbuild's options as a user's NodejsFunction bundles with `minify: true`: ESM, Node 24, `module` before `main`. */
export const AS_NODEJS_FUNCTION = {
  bundle: true,
  minify: true,
  platform: 'node',
  format: 'esm',
  target: 'node24',
  mainFields: ['module', 'main'] as string[],
  write: false,
} as const satisfies BuildOptions;

/**
 * Bundles `entry` the way a user's NodejsFunction does with `minify: true` (esbuild, ESM, Node 24,
 * `module` before `main`), without writing it.
 * @param entry repository-relative path of the handler
 * @param awsSdk `bundled` puts the AWS SDK in the bundle (this repository's OUTBOX_BUNDLING,
 *   `bundleAwsSDK: true`; the larger figure); `external` leaves `@aws-sdk/*` to the Lambda
 *   runtime's copy, NodejsFunction's default on Node 18 and later
 */
export async function bundleSize(
  entry: string,
  awsSdk: 'bundled' | 'external' = 'bundled',
): Promise<BundleSize> {
  const result = await build({
    ...AS_NODEJS_FUNCTION,
    entryPoints: [`${root}${entry}`],
    external: awsSdk === 'external' ? ['@aws-sdk/*'] : [],
    metafile: true,
    logLevel: 'error',
  });
  const inputs: Record<string, number> = {};
  for (const [path, { bytes }] of Object.entries(result.metafile.inputs)) {
    const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(path)?.[1] ?? path.split('/').slice(0, 2).join('/');
    inputs[pkg] = (inputs[pkg] ?? 0) + bytes;
  }
  return { bytes: result.outputFiles[0]?.contents.byteLength ?? 0, inputs };
}

/** Installed packages (folders with a package.json directly under node_modules or a scope). */
export async function countPackages(nodeModules: string): Promise<number> {
  let count = 0;
  const walk = async (dir: string): Promise<void> => {
    for (const entry of await readdir(dir, { withFileTypes: true }).catch(() => [])) {
      if (!entry.isDirectory() || entry.name.startsWith('.')) continue;
      const path = join(dir, entry.name);
      if (entry.name.startsWith('@')) {
        await walk(path);
        continue;
      }
      count++;
      await walk(join(path, 'node_modules'));
    }
  };
  await walk(nodeModules);
  return count;
}

/** Apparent size of a folder, bytes (what `du --apparent-size` counts). */
export async function folderBytes(dir: string): Promise<number> {
  let bytes = 0;
  for (const entry of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (entry.isFile()) bytes += (await stat(join(entry.parentPath, entry.name))).size;
  }
  return bytes;
}

/**
 * A module for `node --input-type=module -e IMPORT_PROBE <specifier>…`: imports each specifier in
 * turn, recording every module resolved to a file under node_modules, then prints one JSON line:
 * `{ rss, modules, packages }` (RSS in bytes; modules loaded from node_modules; their packages).
 */
export const IMPORT_PROBE = `
import { registerHooks } from 'node:module';
const loaded = new Set();
registerHooks({ resolve(specifier, context, next) {
  const result = next(specifier, context);
  // The last node_modules in the path: a nested dependency counts as itself.
  const m = [...result.url.matchAll(/node_modules\\/((?:@[^/]+\\/)?[^/]+)/g)].at(-1);
  if (m) loaded.add(m[1] + ':' + result.url);
  return result;
} });
for (const specifier of process.argv.slice(1)) await import(specifier);
const packages = [...new Set([...loaded].map((l) => l.split(':')[0]))];
console.log(JSON.stringify({ rss: process.memoryUsage().rss, modules: loaded.size, packages }));
`;

/**
 * Schemas whose zod cost `npm run footprint` prints, each written for `zod/mini` and for `zod`:
 * the example consumer's (an object of a string and a non-negative number) and a richer one (an
 * enum, an array of objects, an integer, an optional field, an ISO date-time, an email).
 */
export const ZOD_SCHEMAS = {
  "the example consumer's": {
    mini: `z.object({ orderId: z.string(), total: z.number().check(z.nonnegative()) })`,
    full: `z.object({ orderId: z.string(), total: z.number().nonnegative() })`,
  },
  'a richer one': {
    mini: `z.object({ orderId: z.string().check(z.minLength(1)), total: z.number().check(z.nonnegative()), currency: z.enum(['EUR', 'USD']), lines: z.array(z.object({ sku: z.string(), qty: z.int() })), note: z.optional(z.string()), at: z.iso.datetime(), email: z.email() })`,
    full: `z.object({ orderId: z.string().min(1), total: z.number().nonnegative(), currency: z.enum(['EUR', 'USD']), lines: z.array(z.object({ sku: z.string(), qty: z.int() })), note: z.string().optional(), at: z.iso.datetime(), email: z.email() })`,
  },
} as const;

/**
 * What a schema costs a bundle: a module that builds it with `zod/mini` (or `zod`) and parses a
 * value, bundled and minified as {@link bundleSize} bundles, bytes (the module's own code is a
 * few dozen of them).
 */
export async function schemaBundleBytes(schema: string, from: 'zod/mini' | 'zod'): Promise<number> {
  const imported = from === 'zod' ? `import { z } from 'zod';` : `import * as z from 'zod/mini';`;
  const result = await build({
    ...AS_NODEJS_FUNCTION,
    stdin: { contents: `${imported}\nconsole.log(${schema}.safeParse({}));\n`, resolveDir: root },
    logLevel: 'error',
  });
  return result.outputFiles[0]?.contents.byteLength ?? 0;
}
