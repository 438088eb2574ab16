/**
 * The `outbox` command line, on commander. Every command reads the configuration contract's
 * environment variables (DATABASE_URL or PG*, EVENT_BUS_NAME, OUTBOX_*; the endpoint through the
 * AWS SDK's own AWS_ENDPOINT_URL_EVENTBRIDGE).
 */
import { createInterface } from 'node:readline/promises';
import { Command, CommanderError, InvalidArgumentError } from 'commander';
import { getStatus, migrateWithRoles } from '../shared/operations/index.ts';
import {
  connect,
  DEFAULT_ROLES,
  databaseUrlFromEnv,
  ignoreTransientDriverRejections,
  loadRelaySettings,
  migrate,
  OutboxError,
  openPool,
  type Sql,
} from '../shared/platform/index.ts';
import {
  checkEventBridgeClient,
  createEventBridgeClient,
  type RelayCounts,
  runRelay,
} from '../shared/relay/index.ts';
import { enqueueFromLines } from './enqueue-lines.ts';
import { registerOperations } from './operations.ts';

/** Commander argument parser for a positive integer option. */
function positiveInteger(value: string): number {
  if (!/^\d+$/.test(value) || Number(value) < 1) throw new InvalidArgumentError('must be a positive integer');
  return Number(value);
}

/** Where the CLI writes; tests pass their own. */
export interface CliIo {
  out: (line: string) => void;
  err: (line: string) => void;
  stdin: AsyncIterable<string | Buffer>;
  env: NodeJS.ProcessEnv;
  /** Asks a yes/no question on the terminal; false when there is none. */
  confirm: (question: string) => Promise<boolean>;
}

const defaultIo = (): CliIo => ({
  out: (line) => process.stdout.write(`${line}\n`),
  err: (line) => process.stderr.write(`${line}\n`),
  stdin: process.stdin,
  env: process.env,
  confirm: async (question) => {
    if (!process.stdin.isTTY) return false;
    const rl = createInterface({ input: process.stdin, output: process.stderr });
    try {
      return /^y(es)?$/i.test((await rl.question(question)).trim());
    } finally {
      rl.close();
    }
  },
});

/**
 * Runs the CLI.
 * @param argv `process.argv` shape (node, script, …args)
 * @returns the exit code: 0 ok, 1 failure, 2 usage or configuration error
 */
export async function main(argv: string[], io: CliIo = defaultIo()): Promise<number> {
  let code = 0;
  const withDb = async (fn: (sql: Sql) => Promise<void>) => {
    const sql = connect({ env: io.env, applicationName: 'outbox-cli' });
    try {
      await fn(sql);
    } finally {
      await sql.end({ timeout: 5 });
    }
  };

  const program = new Command('outbox')
    .description('Transactional outbox relay: Postgres outbox table → Amazon EventBridge')
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.out(s.trimEnd()), writeErr: (s) => io.err(s.trimEnd()) });

  program
    .command('migrate')
    .description('apply pending schema migrations (outbox tables) to the database')
    .option(
      '--roles',
      'also create or update the deployment roles (outbox_relay, outbox_monitor, outbox_producer, outbox_consumer) exactly as the deploy-time migrate function does; needs a user that may create roles',
    )
    .action(async (opts: { roles?: boolean }) => {
      const url = databaseUrlFromEnv(io.env);
      const applied = opts.roles ? await migrateWithRoles(url) : await migrate(url, { log: () => {} });
      io.out(
        applied.length === 0
          ? 'schema is up to date'
          : `applied ${applied.length} migration(s): ${applied.join(', ')}`,
      );
      if (opts.roles) io.out(`roles ensured: ${Object.values(DEFAULT_ROLES).join(', ')}`);
    });

  program
    .command('relay')
    .description('publish outbox rows to EventBridge until stopped (Ctrl-C)')
    .option('--once', 'run a single claim-publish-mark pass, then exit')
    .option('--until-empty', 'exit once no pending row is left')
    .option('--quiet', 'print only the final summary')
    .action(async (opts: { once?: boolean; untilEmpty?: boolean; quiet?: boolean }) => {
      const settings = loadRelaySettings(io.env);
      ignoreTransientDriverRejections((message) => io.err(`relay: ${message}`));
      const client = createEventBridgeClient();
      await checkEventBridgeClient(client);
      const abort = new AbortController();
      const onSignal = () => abort.abort();
      process.once('SIGINT', onSignal);
      process.once('SIGTERM', onSignal);
      const started = performance.now();
      let window = { published: 0, at: started };
      // A pool the relay can replace when a connection breaks or stops answering.
      const pool = openPool({ env: io.env, applicationName: 'outbox-cli' });
      try {
        const result = await runRelay({
          sql: pool,
          client,
          settings,
          signal: abort.signal,
          once: opts.once,
          untilEmpty: opts.untilEmpty,
          // A one-shot run gives up on an unreachable database (exit 1) instead of retrying forever.
          maxConsecutiveErrors: opts.once || opts.untilEmpty ? 5 : undefined,
          onTransientError: (error, consecutive) => {
            if (!opts.quiet || consecutive === 1) {
              io.err(
                `relay: database unavailable (${(error as { code?: string }).code ?? 'error'}), retrying…`,
              );
            }
          },
          onPass: (c: RelayCounts) => {
            window.published += c.published;
            const now = performance.now();
            if (!opts.quiet && now - window.at >= 1_000) {
              io.err(
                `relay: ${window.published} published in the last ${((now - window.at) / 1000).toFixed(1)} s`,
              );
              window = { published: 0, at: now };
            }
          },
        });
        const seconds = (performance.now() - started) / 1000;
        io.out(
          `relay stopped (${result.stopReason}) after ${seconds.toFixed(2)} s: ` +
            `published ${result.published}, retried ${result.retried}, dead-lettered ${result.deadLettered}, ` +
            `lease lost ${result.leaseLost}, ${(result.published / Math.max(seconds, 0.001)).toFixed(0)} events/s`,
        );
      } finally {
        await pool.end();
        process.off('SIGINT', onSignal);
        process.off('SIGTERM', onSignal);
      }
    });

  program
    .command('enqueue')
    .description(
      'enqueue events from JSON lines on stdin (backfills); all lines are validated before any is written',
    )
    .option('--source <source>', 'Source for lines without one (default: $OUTBOX_DEFAULT_SOURCE)')
    .option('--batch-size <n>', 'events per transaction', positiveInteger, 1000)
    .action(async (opts: { source?: string; batchSize: number }) => {
      await withDb(async (sql) => {
        const result = await enqueueFromLines(sql, io.stdin, {
          defaultSource: opts.source ?? io.env.OUTBOX_DEFAULT_SOURCE,
          // The bus's request limit bounds an entry too: what the relay could not send is refused here.
          maxEntryBytes: loadRelaySettings({ EVENT_BUS_NAME: 'unused', ...io.env }).maxRequestBytes,
          batchSize: opts.batchSize,
          progress: (n) => io.err(`enqueue: ${n} events written`),
        });
        if (result.errors.length > 0) {
          for (const e of result.errors) io.err(`line ${e.line}: ${e.message}`);
          io.err(`enqueue: ${result.errors.length} invalid line(s); nothing was written`);
          code = 1;
          return;
        }
        io.out(`enqueued ${result.enqueued} event(s), ${result.duplicates} duplicate(s) skipped`);
      });
    });

  program
    .command('status')
    .description('show the backlog: pending, oldest pending age, in flight, dead-lettered, published')
    .option('--json', 'print JSON')
    .action(async (opts: { json?: boolean }) => {
      await withDb(async (sql) => {
        const s = await getStatus(sql);
        if (opts.json) {
          io.out(JSON.stringify(s));
          return;
        }
        io.out(`pending:             ${s.pending}`);
        io.out(`oldest pending age:  ${s.oldestPendingAgeSeconds.toFixed(1)} s`);
        io.out(`in flight:           ${s.inFlight}`);
        io.out(`dead-lettered:       ${s.deadLettered}`);
        io.out(`published:           ${s.published}`);
      });
    });

  registerOperations(program, {
    out: io.out,
    err: io.err,
    env: io.env,
    withDb,
    confirm: io.confirm,
    setExitCode: (c) => {
      code = c;
    },
  });

  try {
    await program.parseAsync(argv);
    return code;
  } catch (error) {
    if (error instanceof CommanderError) return error.exitCode === 0 ? 0 : 2;
    if (error instanceof OutboxError) {
      io.err(`error: ${error.message}`);
      return error.name === 'OutboxConfigError' ? 2 : 1;
    }
    const e = error as Error & { code?: string };
    io.err(`error: ${e.message}${e.code ? ` (${e.code})` : ''}`);
    return 1;
  }
}
