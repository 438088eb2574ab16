/**
 * The deployed relay bundle: where `cdk synth` put it, and what it is made of.
 */
import { readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import type { BundlingOptions } from 'aws-cdk-lib/aws-lambda-nodejs';
import { build } from 'esbuild';

/** A function's asset in `cdk.out`. */
export interface LambdaAsset {
  /** The asset directory (holds `index.mjs`, and `index.mjs.map` when source maps are on). */
  dir: string;
  bundleBytes: number;
  /** 0 without a source map. */
  mapBytes: number;
  /** The function's environment as synthesised (values that are tokens are left out). */
  environment: Record<string, string>;
  memorySize: number;
}

/**
 * Finds the asset of the function whose Description starts with `descriptionPrefix` in the
 * synthesised template of `stackName`.
 */
export function findLambdaAsset(cdkOut: string, stackName: string, descriptionPrefix: string): LambdaAsset {
  const template = JSON.parse(readFileSync(join(cdkOut, `${stackName}.template.json`), 'utf8')) as {
    Resources: Record<string, { Type: string; Properties: Record<string, unknown> }>;
  };
  for (const resource of Object.values(template.Resources)) {
    const p = resource.Properties;
    if (resource.Type !== 'AWS::Lambda::Function') continue;
    if (!String(p.Description ?? '').startsWith(descriptionPrefix)) continue;
    const key = String((p.Code as { S3Key?: string }).S3Key ?? '');
    const dir = join(cdkOut, `asset.${key.replace(/\.zip$/, '')}`);
    const size = (f: string) => {
      try {
        return statSync(join(dir, f)).size;
      } catch {
        return 0;
      }
    };
    const variables = ((p.Environment as { Variables?: Record<string, unknown> })?.Variables ?? {}) as Record<
      string,
      unknown
    >;
    const environment: Record<string, string> = {};
    for (const [k, v] of Object.entries(variables)) if (typeof v === 'string') environment[k] = v;
    return {
      dir,
      bundleBytes: size('index.mjs'),
      mapBytes: size('index.mjs.map'),
      environment,
      memorySize: Number(p.MemorySize ?? 128),
    };
  }
  throw new Error(`no function described "${descriptionPrefix}…" in ${stackName}`);
}

/** Bytes of the minified bundle by package (or by our folder), largest first. */
export async function bundleComposition(
  entry: string,
  bundling: BundlingOptions,
): Promise<{ name: string; bytes: number }[]> {
  const result = await build({
    entryPoints: [entry],
    bundle: true,
    write: false,
    outfile: 'index.mjs',
    platform: 'node',
    format: bundling.format === 'esm' ? 'esm' : 'cjs',
    target: bundling.target,
    minify: bundling.minify,
    keepNames: bundling.keepNames,
    external: bundling.externalModules,
    mainFields: bundling.mainFields,
    define: bundling.define,
    banner: bundling.banner ? { js: bundling.banner } : undefined,
    metafile: true,
    logLevel: 'silent',
  });
  const output = Object.values(result.metafile.outputs)[0];
  const by = new Map<string, number>();
  for (const [file, info] of Object.entries(output?.inputs ?? {})) {
    const pkg = /node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(file)?.[1];
    const name = pkg ?? file.split('/').slice(0, 2).join('/');
    by.set(name, (by.get(name) ?? 0) + info.bytesInOutput);
  }
  return [...by.entries()].map(([name, bytes]) => ({ name, bytes })).sort((a, b) => b.bytes - a.bytes);
}
