/**
 * `npm run build` (and `prepack`): the package as it is published, in dist/.
 * - `tsc -p tsconfig.build.json`: ESM JavaScript and .d.ts for the entry points and what they import;
 * - dist/migrations: the SQL migrations, where the compiled migrate module looks for them;
 * - dist/lambda/<relay|monitor|migrate>/index.mjs: the handler bundles the OutboxRelay construct
 *   deploys from the installed package, built with esbuild using the construct's own bundling
 *   options, so a consumer's `cdk synth` needs neither esbuild nor Docker. The migrate bundle
 *   carries the migrations beside it, as its NodejsFunction build does.
 */
import { execFileSync } from 'node:child_process';
import { cp, rm, stat } from 'node:fs/promises';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';
import { HANDLER_ENTRIES, type HandlerName, OUTBOX_BUNDLING } from '../infra/outbox-relay.ts';

const root = fileURLToPath(new URL('..', import.meta.url));
const dist = `${root}dist`;

await rm(dist, { recursive: true, force: true });
execFileSync('tsc', ['-p', `${root}tsconfig.build.json`], { stdio: 'inherit', cwd: root });
await cp(`${root}migrations`, `${dist}/migrations`, { recursive: true });

for (const [name, entry] of Object.entries(HANDLER_ENTRIES) as [HandlerName, string][]) {
  const outdir = `${dist}/lambda/${name}`;
  await build({
    entryPoints: [`${root}${entry}`],
    outfile: `${outdir}/index.mjs`,
    bundle: true,
    platform: 'node',
    format: 'esm',
    mainFields: ['module', 'main'],
    target: OUTBOX_BUNDLING.target,
    minify: OUTBOX_BUNDLING.minify,
    keepNames: OUTBOX_BUNDLING.keepNames,
    // A source map only when OUTBOX_BUNDLING asks for one (by default it does not, see its TSDoc),
    // and then without the sources, to keep the package small.
    sourcemap: OUTBOX_BUNDLING.sourceMap,
    sourcesContent: false,
    external: [...(OUTBOX_BUNDLING.externalModules ?? [])],
    banner: OUTBOX_BUNDLING.banner ? { js: OUTBOX_BUNDLING.banner } : {},
    logLevel: 'warning',
  });
  if (name === 'migrate') await cp(`${root}migrations`, `${outdir}/migrations`, { recursive: true });
  const size = (await stat(`${outdir}/index.mjs`)).size;
  console.log(`build: dist/lambda/${name}/index.mjs ${(size / 1024).toFixed(0)} KiB`);
}
