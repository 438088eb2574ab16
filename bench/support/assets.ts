/**
 * The deployed bundle for the bench: `cdk synth` in each checkout (once), the relay's asset from
 * its cdk.out, the environment the synthesised template gives the function (with the database and
 * the bus made local), and one cold init of it in the Lambda host.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { findLambdaAsset, type LambdaAsset } from './bundle.ts';
import { lambdaNodeArgs } from './lambda-host.ts';
import { runMeasured, SCRIPTS } from './processes.ts';
import type { Checkout } from './relay-runs.ts';
import { log } from './report.ts';

/**
 * The bundles of `checkouts`.
 * @param busEnv the database and bus variables of the bench's relay processes
 */
export function deployedAssets(checkouts: Checkout[], busEnv: Record<string, string>) {
  /** The relay asset of each checkout, by checkout directory. */
  const assets = new Map<string, LambdaAsset>();
  /** The `cdk synth` output folder of each checkout, by checkout directory. */
  const cdkOuts = new Map<string, string>();

  /** `cdk synth` in each checkout, once; the relay's asset of each from its cdk.out. */
  async function synth(): Promise<void> {
    if (cdkOuts.size > 0) return;
    for (const c of checkouts) {
      log(`bundle (${c.label}): cdk synth`);
      const cdkOut = mkdtempSync(join(tmpdir(), 'outbox-cdk-'));
      execFileSync(`${c.dir}node_modules/.bin/cdk`, ['synth', '--quiet', '--output', cdkOut], {
        cwd: c.dir,
        stdio: ['ignore', 'ignore', 'inherit'],
      });
      assets.set(c.dir, findLambdaAsset(cdkOut, 'OutboxRelayDemo', 'Outbox relay:'));
      cdkOuts.set(c.dir, cdkOut);
      process.once('exit', () => rmSync(cdkOut, { recursive: true, force: true }));
    }
  }

  /** The relay function's environment for the host: as synthesised, with the database and bus local. */
  function lambdaEnv(a: LambdaAsset, memoryMb: number, extra: Record<string, string | undefined> = {}) {
    const deployed = { ...a.environment };
    // Not here: RDS Proxy with IAM auth, and the RDS CA bundle that exists only in Lambda's image.
    for (const k of Object.keys(deployed)) if (/^PG|^OUTBOX_DB_IAM|NODE_EXTRA_CA/.test(k)) delete deployed[k];
    return {
      ...deployed,
      ...busEnv,
      LAMBDA_TASK_ROOT: a.dir,
      AWS_LAMBDA_FUNCTION_NAME: 'outbox-relay',
      AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(memoryMb),
      AWS_LAMBDA_FUNCTION_VERSION: '$LATEST',
      AWS_EXECUTION_ENV: 'AWS_Lambda_nodejs24.x',
      TZ: 'UTC',
      ...extra,
    };
  }

  /** Runs the host in `init` or `init-error` mode once; returns its report and process usage. */
  async function hostInit(
    a: LambdaAsset,
    mode: 'init' | 'init-error',
    memoryMb: number,
    env: Record<string, string | undefined>,
  ): Promise<Record<string, number> & { cpuUs: number; maxRssMB: number }> {
    const dir = mkdtempSync(join(tmpdir(), 'outbox-host-'));
    const file = join(dir, 'host.jsonl');
    const r = await runMeasured({
      nodeArgs: lambdaNodeArgs(memoryMb),
      args: [SCRIPTS.lambdaHost],
      env: { ...lambdaEnv(a, memoryMb, env), OUTBOX_BENCH_HOST_MODE: mode, OUTBOX_BENCH_HOST_FILE: file },
    });
    const line = JSON.parse(readFileSync(file, 'utf8').trim()) as Record<string, number>;
    rmSync(dir, { recursive: true, force: true });
    return { ...line, cpuUs: r.usage.cpuUs, maxRssMB: r.usage.maxRssKiB / 1024 };
  }
  return { assets, cdkOuts, synth, lambdaEnv, hostInit };
}
