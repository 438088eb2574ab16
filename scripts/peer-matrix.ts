/**
 * `npm run test:peers`: the test files that use each peer, run on the peer's lowest version that
 * the packages' ranges accept and on the registry's latest (issue 47: the producer's range once
 * refused the registry's postgres 4, and nothing had run on it).
 *
 * Each cell installs one peer (with what must match it: aws-cdk-lib with constructs) at one end into
 * a temporary folder, from the registry (`npm install --prefix`), then runs the test files that
 * cover it with OUTBOX_TEST_PEERS pointing at that folder (vitest.config.ts redirects the imports).
 * Progress is printed per cell, and a table at the end; the exit code is 1 when a cell failed.
 *
 *   npm run test:peers                          # every peer, both ends
 *   npm run test:peers -- --peer postgres       # one peer (repeatable)
 *   npm run test:peers -- --end latest          # one end
 *
 * Needs DATABASE_URL (or starts the embedded Postgres as `npm test` does) and the registry.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const repo = fileURLToPath(new URL('..', import.meta.url));

/** The test files that exercise the peer. */
const POSTGRES_SUITES = [
  'test/producer',
  'test/consumer',
  'test/platform/pooler.test.ts',
  'test/relay/exact-values.test.ts',
];
const ADAPTER_SUITE = ['test/producer/adapters.test.ts'];

interface Peer {
  /** The packages installed together, the first being the peer the cell is named after. */
  packages: string[];
  /** The lowest version of each package, the floor of its range in the packages' manifests. */
  lowest: string[];
  files: string[];
  /** Packages the peer imports itself (drizzle's drivers import pg and postgres): installed beside it at the root's versions. */
  companions?: string[];
}

/**
 * The floors: the producer's peers (`postgres` ^3.4.9 || ^4.0.0, `drizzle-orm` >=0.40.0 <1,
 * `kysely` >=0.28.0 <1), the relay's `pg` (^8.11.0, which the `/pg` adapter's users bring too) and
 * the CDK package's peers (`aws-cdk-lib` ^2.276.0, `constructs` ^10.8.1). test/repo/packages.test.ts
 * keeps them equal to the manifests.
 */
export const PEERS: Record<string, Peer> = {
  postgres: { packages: ['postgres'], lowest: ['3.4.9'], files: POSTGRES_SUITES },
  pg: { packages: ['pg'], lowest: ['8.11.0'], files: ADAPTER_SUITE },
  'drizzle-orm': {
    packages: ['drizzle-orm'],
    lowest: ['0.40.0'],
    files: ADAPTER_SUITE,
    companions: ['pg', 'postgres'],
  },
  kysely: { packages: ['kysely'], lowest: ['0.28.0'], files: ADAPTER_SUITE },
  'aws-cdk-lib': {
    packages: ['aws-cdk-lib', 'constructs'],
    lowest: ['2.276.0', '10.8.1'],
    files: ['test/infra'],
  },
};

type End = 'lowest' | 'latest';

/** The parts of vitest's JSON report read here. */
interface VitestReport {
  numPassedTests: number;
  numFailedTests: number;
  testResults?: {
    name: string;
    assertionResults?: { fullName: string; status: string; failureMessages?: string[] }[];
  }[];
}

interface Cell {
  peer: string;
  end: End;
  versions: string;
  passed: number;
  failed: number;
  seconds: number;
  error?: string;
}

function run(
  command: string,
  args: string[],
  env: NodeJS.ProcessEnv = process.env,
): Promise<{ code: number; output: string }> {
  return new Promise((resolve) => {
    const child = spawn(command, args, { cwd: repo, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (chunk) => {
      output += chunk;
    });
    child.stderr.on('data', (chunk) => {
      output += chunk;
    });
    // Every wait has a deadline: an install or a cell that hangs is stopped after 30 minutes.
    const timer = setTimeout(() => child.kill('SIGTERM'), 30 * 60_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code: code ?? 1, output });
    });
  });
}

async function runCell(peer: string, end: End): Promise<Cell> {
  const spec = PEERS[peer] as Peer;
  const started = Date.now();
  const dir = await mkdtemp(join(tmpdir(), `outbox-peers-${peer}-${end}-`));
  try {
    const wanted = spec.packages.map((name, i) => `${name}@${end === 'lowest' ? spec.lowest[i] : 'latest'}`);
    for (const name of spec.companions ?? []) {
      const manifest = JSON.parse(await readFile(join(repo, 'node_modules', name, 'package.json'), 'utf8'));
      wanted.push(`${name}@${manifest.version}`);
    }
    const install = await run('npm', [
      'install',
      '--prefix',
      dir,
      '--no-save',
      '--no-audit',
      '--no-fund',
      '--ignore-scripts',
      ...wanted,
    ]);
    if (install.code !== 0)
      throw new Error(`npm install ${wanted.join(' ')} failed:\n${install.output.slice(-2000)}`);
    const versions = (
      await Promise.all(
        spec.packages.map(async (name) => {
          const manifest = JSON.parse(
            await readFile(join(dir, 'node_modules', name, 'package.json'), 'utf8'),
          );
          return `${name}@${manifest.version}`;
        }),
      )
    ).join(' ');
    console.log(`peers: ${peer} ${end}: ${versions}, running ${spec.files.join(' ')}`);
    const report = join(dir, 'vitest.json');
    const tests = await run(
      'npx',
      ['vitest', 'run', ...spec.files, '--reporter=json', `--outputFile=${report}`],
      { ...process.env, OUTBOX_TEST_PEERS: join(dir, 'node_modules'), OUTBOX_TEST_POSTGRES: '3' },
    );
    let counts: VitestReport = { numPassedTests: 0, numFailedTests: 0 };
    try {
      counts = JSON.parse(await readFile(report, 'utf8'));
    } catch {
      throw new Error(`vitest wrote no report (exit ${tests.code}):\n${tests.output.slice(-2000)}`);
    }
    const cell: Cell = {
      peer,
      end,
      versions,
      passed: counts.numPassedTests,
      failed: counts.numFailedTests,
      seconds: Math.round((Date.now() - started) / 1000),
    };
    if (tests.code !== 0 && cell.failed === 0) cell.error = `vitest exited ${tests.code}`;
    // Name each failed test, with the first line of its failure (the report goes with the folder).
    for (const file of counts.testResults ?? []) {
      for (const test of file.assertionResults ?? []) {
        if (test.status !== 'failed') continue;
        const why = (test.failureMessages?.[0] ?? '').split('\n')[0];
        console.log(`peers:   failed: ${file.name.replace(repo, '')} > ${test.fullName}: ${why}`);
      }
    }
    return cell;
  } catch (error) {
    return {
      peer,
      end,
      versions: '?',
      passed: 0,
      failed: 0,
      seconds: Math.round((Date.now() - started) / 1000),
      error: error instanceof Error ? error.message : String(error),
    };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      peer: { type: 'string', multiple: true },
      end: { type: 'string' },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    console.log(
      `usage: npm run test:peers -- [--peer ${Object.keys(PEERS).join('|')}]… [--end lowest|latest]`,
    );
    return;
  }
  const peers = values.peer ?? Object.keys(PEERS);
  for (const peer of peers) {
    if (!PEERS[peer])
      throw new Error(`--peer must be one of ${Object.keys(PEERS).join(', ')}, got ${JSON.stringify(peer)}`);
  }
  if (values.end !== undefined && values.end !== 'lowest' && values.end !== 'latest') {
    throw new Error(`--end must be lowest or latest, got ${JSON.stringify(values.end)}`);
  }
  const ends: End[] = values.end ? [values.end as End] : ['lowest', 'latest'];
  const cells: Cell[] = [];
  const total = peers.length * ends.length;
  for (const peer of peers) {
    for (const end of ends) {
      console.log(`peers: [${cells.length + 1}/${total}] ${peer} ${end}: installing`);
      const cell = await runCell(peer, end);
      cells.push(cell);
      const verdict = cell.error
        ? `error: ${cell.error.split('\n')[0]}`
        : `${cell.passed} passed, ${cell.failed} failed`;
      console.log(
        `peers: [${cells.length}/${total}] ${peer} ${end} (${cell.versions}): ${verdict}, ${cell.seconds} s`,
      );
      if (cell.error) console.log(cell.error);
    }
  }
  console.log('\n| peer | end | versions | passed | failed | seconds |\n|---|---|---|---|---|---|');
  for (const c of cells) {
    console.log(
      `| ${c.peer} | ${c.end} | ${c.versions} | ${c.passed} | ${c.error ? `${c.failed} (${c.error.split('\n')[0]})` : c.failed} | ${c.seconds} |`,
    );
  }
  const passed = cells.reduce((n, c) => n + c.passed, 0);
  const failed = cells.reduce((n, c) => n + c.failed, 0);
  console.log(`\n${passed} passed, ${failed} failed`);
  if (cells.some((c) => c.failed > 0 || c.error)) process.exitCode = 1;
}

// Run when started (`npm run test:peers`), not when a test imports PEERS.
if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) await main();
