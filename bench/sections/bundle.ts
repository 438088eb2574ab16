import { OUTBOX_BUNDLING } from '../../infra/bundling.ts';
import type { Bench } from '../support/bench.ts';
import { bundleComposition, type LambdaAsset } from '../support/bundle.ts';
import { median } from '../support/processes.ts';

/** Runs the section (its parts check `want` themselves). */
export async function runBundle(bench: Bench): Promise<void> {
  const { params, root, checkouts, results, baselineDir, report, log, MB, want, assets, hostInit } = bench;
  const asset = bench.assets.get(bench.root);
  // 8. Bundle size, composition, cold init and what source maps cost.
  if (want('bundle') && asset) {
    const composition = await bundleComposition(`${root}functions/relay/handler.ts`, OUTBOX_BUNDLING);
    const init: Record<string, Record<string, number>> = {};
    const rows: string[] = [];
    // Each checkout as deployed (its NODE_OPTIONS), and, where it ships a source map, without
    // --enable-source-maps, which shows what reading the map costs.
    const variants = checkouts.flatMap(
      (c): { name: string; a: LambdaAsset; env: Record<string, undefined> }[] => {
        const a = assets.get(c.dir) as LambdaAsset;
        const deployed = a.environment.NODE_OPTIONS ?? '';
        const name = (v: string) => `${checkouts.length > 1 ? `${c.label}: ` : ''}${v}`;
        const list = [
          {
            name: name(
              `as deployed (${(a.bundleBytes / 1024).toFixed(0)} KiB${a.mapBytes ? ` + ${(a.mapBytes / 1024).toFixed(0)} KiB map` : ', no map'}, NODE_OPTIONS=${deployed || 'none'})`,
            ),
            a,
            env: {},
          },
        ];
        if (a.mapBytes > 0 && deployed.includes('--enable-source-maps')) {
          list.push({
            name: name('the same without --enable-source-maps'),
            a,
            env: { NODE_OPTIONS: undefined },
          } as never);
        }
        return list;
      },
    );
    const samples = new Map<string, { runs: Record<string, number>[]; errors: Record<string, number>[] }>();
    for (const v of variants) samples.set(v.name, { runs: [], errors: [] });
    log(`bundle: cold init, ${variants.length} variants × ${params.initRepeats} runs, alternating`);
    for (let i = 0; i < params.initRepeats; i++) {
      for (const v of variants) {
        const s = samples.get(v.name) as { runs: Record<string, number>[]; errors: Record<string, number>[] };
        s.runs.push(await hostInit(v.a, 'init', 128, v.env));
        s.errors.push(await hostInit(v.a, 'init-error', 128, { ...v.env, EVENT_BUS_NAME: '' }));
      }
    }
    for (const v of variants) {
      const { runs, errors } = samples.get(v.name) as {
        runs: Record<string, number>[];
        errors: Record<string, number>[];
      };
      const f = {
        importMs: Math.round(median(runs.map((r) => r.importMs as number))),
        processCpuMs: Math.round(median(runs.map((r) => r.cpuUs as number)) / 1000),
        rssAfterInitMB: MB(median(runs.map((r) => r.rss as number))),
        heapAfterInitMB: MB(median(runs.map((r) => r.heapUsed as number))),
        firstStackMs: Number(median(errors.map((r) => r.firstStackMs as number)).toFixed(1)),
        againStackMs: Number(median(errors.map((r) => r.againStackMs as number)).toFixed(2)),
        rssAfterErrorMB: MB(median(errors.map((r) => r.rss as number))),
      };
      init[v.name] = f;
      rows.push(
        `| ${v.name} | ${f.importMs} ms | ${f.processCpuMs} ms | ${f.rssAfterInitMB} MB | ${f.heapAfterInitMB} MB | ${f.firstStackMs} ms | ${f.againStackMs} ms | ${f.rssAfterErrorMB} MB |`,
      );
    }
    results.bundle = {
      bundleBytes: asset.bundleBytes,
      mapBytes: asset.mapBytes,
      nodeOptions: asset.environment.NODE_OPTIONS ?? '',
      composition: composition.slice(0, 12),
      baseline: baselineDir
        ? { bundleBytes: assets.get(baselineDir)?.bundleBytes, mapBytes: assets.get(baselineDir)?.mapBytes }
        : undefined,
      init,
    };
    report(
      `### The relay bundle and its cold init (from \`cdk synth\`)

  Bundle \`index.mjs\` ${(asset.bundleBytes / 1024).toFixed(0)} KiB minified${asset.mapBytes ? `, source map ${(asset.mapBytes / 1024).toFixed(0)} KiB` : ', no source map'}. Largest parts: ${composition
    .slice(0, 8)
    .map((c) => `${c.name} ${(c.bytes / 1024).toFixed(0)} KiB`)
    .join(', ')}.

  | | init (import + clients) | process CPU to init | RSS after init | heap after init | first error's stack | next stack | RSS after an init error |
  |---|---|---|---|---|---|---|---|
  ${rows.join('\n')}

  Init: importing the bundle, which validates the configuration and constructs the database pool and the EventBridge client, in a process with the heap limits of a 128 MB function (median of ${params.initRepeats}, variants alternating). An init error: the bundle imported without EVENT_BUS_NAME, the configuration error's stack formatted as the runtime logs it.`,
    );
  }
}
