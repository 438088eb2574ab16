/**
 * How the construct's Lambdas are built: their handler entries, the bundles the installed package
 * carries (built at pack time by scripts/build.ts), and the esbuild options used from source.
 */
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import * as nodejs from 'aws-cdk-lib/aws-lambda-nodejs';

/** The repository (or the installed package) root, with a trailing slash. */
export const repoRoot = fileURLToPath(new URL('..', import.meta.url));

/** The Lambda handlers' sources (relative to the repository) by bundle name. */
export const HANDLER_ENTRIES = {
  relay: 'functions/relay/handler.ts',
  monitor: 'functions/monitor/handler.ts',
  migrate: 'functions/migrate/handler.ts',
} as const;
/** One of {@link HANDLER_ENTRIES}' names. */
export type HandlerName = keyof typeof HANDLER_ENTRIES;

/**
 * Where the installed package keeps its handler bundles, built at pack time (scripts/build.ts):
 * `dist/lambda/<name>/index.mjs`, beside the compiled construct in `dist/infra/`. A consumer's
 * `cdk synth` then only zips that folder — no esbuild, no Docker. From a source checkout (this
 * file under `infra/`) the folder does not exist, and the construct bundles the TypeScript handlers
 * with NodejsFunction instead.
 * @returns the bundle's folder, or undefined when there is no pre-built bundle
 */
export function prebuiltBundle(name: HandlerName): string | undefined {
  const dir = fileURLToPath(new URL(`../lambda/${name}`, import.meta.url));
  return existsSync(join(dir, 'index.mjs')) ? dir : undefined;
}

/**
 * How the project's Lambdas are bundled: ESM for Node 24, minified, locally with esbuild (no
 * Docker), our pinned AWS SDK clients included rather than the runtime's copy; the packages' ES
 * module builds first (`mainFields`), so esbuild can tree-shake them; no source map, but function
 * names kept (`keepNames`), since reading a map costs a small function's memory exactly when
 * something fails (docs/investigations/relay-cpu.md#the-lambda-bundles). To ship maps anyway, pass your own
 * `bundling` with `sourceMap: true` and `sourcesContent: false`.
 */
export const OUTBOX_BUNDLING: nodejs.BundlingOptions = {
  format: nodejs.OutputFormat.ESM,
  mainFields: ['module', 'main'],
  minify: true,
  sourceMap: false,
  keepNames: true,
  target: 'node24',
  bundleAwsSDK: true,
  forceDockerBundling: false,
  externalModules: ['pg-native'],
  banner: "import { createRequire } from 'module'; const require = createRequire(import.meta.url);",
};
