/**
 * The `outbox` command line, on commander. Every command reads the configuration contract's
 * environment variables (DATABASE_URL or PG*, EVENT_BUS_NAME, OUTBOX_*; the endpoint through the
 * AWS SDK's own AWS_ENDPOINT_URL_EVENTBRIDGE).
 *
 * Conventions: results on stdout, progress and errors on stderr; `--json` prints exactly one JSON
 * document on stdout (an object, or an array for lists) and nothing else there; exit 0 success,
 * 1 failure, 2 usage or configuration error (see {@link EXIT}).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError, Option } from 'commander';
import { getStatus, migrateWithRoles } from '../shared/operations/index.ts';
import {
  connect,
  DEFAULT_ROLES,
  databasePasswords,
  databaseUrlFromEnv,
  describeConnectionFailure,
  ignoreTransientDriverRejections,
  isConnectFailure,
  loadRelaySettings,
  migrate,
  openPool,
  redactPasswords,
  type Sql,
  withDeadline,
} from '../shared/platform/index.ts';
import {
  checkEventBridgeClient,
  countHeldBack,
  createEventBridgeClient,
  type HeldBack,
  runRelay,
  STATEMENT_DEADLINE_MS,
} from '../shared/relay/index.ts';
import { type EnqueueProgress, enqueueFromLines } from './enqueue-lines.ts';
import { EXIT, explainError, LOCAL_DATABASE_HINT } from './errors.ts';
import { registerInbox } from './inbox.ts';
import { type OperationsContext, registerOperations } from './operations.ts';
import { positiveInteger } from './parsers.ts';
import { type FailureReason, REPORT_EVERY_MS, RelayReport } from './relay-report.ts';
import { onInterrupt } from './signals.ts';

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
 * A one-shot `relay --until-empty` gives up after this many passes in a row in which every event
 * failed: the bus is unreachable or refuses everything, and retrying until the events run out of
 * attempts would only take minutes to say the same.
 */
const GIVE_UP_AFTER_FAILED_PASSES = 5;

/** Socket errors of a PutEvents request that never reached the bus (as the SDK words them). */
const UNREACHABLE = /\b(ECONNREFUSED|ENOTFOUND|EAI_AGAIN|ETIMEDOUT|ECONNRESET|EHOSTUNREACH)\b/;

/**
 * What to check when the bus could not be reached at all: the endpoint override, when one is set
 * (the local bus), else the region and network. A hint only: nothing depends on it.
 */
function endpointHint(failures: FailureReason[], env: NodeJS.ProcessEnv): string[] {
  if (!failures.some((f) => UNREACHABLE.test(f.reason))) return [];
  const variable = env.AWS_ENDPOINT_URL_EVENTBRIDGE ? 'AWS_ENDPOINT_URL_EVENTBRIDGE' : 'AWS_ENDPOINT_URL';
  const endpoint = env[variable];
  return endpoint
    ? [
        `The bus endpoint did not answer: is ${variable}=${endpoint} right, and is it running (\`npm run bus\` for the local one)?`,
      ]
    : ['The bus endpoint did not answer: check AWS_REGION and the network path to EventBridge.'];
}

/** Least time between two `enqueue` progress lines, ms. */
const ENQUEUE_PROGRESS_EVERY_MS = 1_000;

/** The package's version: from the nearest package.json above this file (source or built layout). */
function packageVersion(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
    const file = join(dir, 'package.json');
    if (existsSync(file))
      return (JSON.parse(readFileSync(file, 'utf8')) as { version?: string }).version ?? '0.0.0';
  }
  return '0.0.0';
}

/**
 * Runs the CLI.
 * @param argv `process.argv` shape (node, script, …args)
 * @returns the exit code: 0 ok, 1 failure, 2 usage or configuration error
 */
export async function main(argv: string[], cliIo: CliIo = defaultIo()): Promise<number> {
  // The last line of defence: no line printed, whatever produced it (a driver's message included),
  // carries a database password. Messages built here never hold one (maskDatabaseUrl).
  const passwords = databasePasswords(cliIo.env);
  const io: CliIo = {
    ...cliIo,
    out: (line) => cliIo.out(redactPasswords(line, passwords)),
    err: (line) => cliIo.err(redactPasswords(line, passwords)),
  };
  let code: number = EXIT.ok;
  const json = (value: unknown) => io.out(JSON.stringify(value));
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
    .version(packageVersion(), '-V, --version', 'print the version')
    .exitOverride()
    .showHelpAfterError('(add --help for usage)')
    .configureOutput({ writeOut: (s) => io.out(s.trimEnd()), writeErr: (s) => io.err(s.trimEnd()) })
    .addHelpText(
      'after',
      `
Environment:
  DATABASE_URL                  postgres://user:password@host:5432/database (else libpq's PGHOST, PGPORT,
                                PGUSER, PGPASSWORD, PGDATABASE); \`npm run db\` in a checkout starts a local one
  EVENT_BUS_NAME                the EventBridge bus (relay)
  AWS_REGION, AWS credentials   to sign PutEvents (relay); AWS_ENDPOINT_URL_EVENTBRIDGE for a local bus
  OUTBOX_*                      tuning, each with a default (docs/configuration.md)

Output: results on stdout, progress and errors on stderr; --json prints one JSON document.
Exit status: 0 success, 1 failure, 2 usage or configuration error.`,
    );

  program
    .command('migrate')
    .description('apply pending schema migrations (outbox tables) to the database')
    .option(
      '--roles',
      'also create or update the deployment roles (outbox_relay, outbox_monitor, outbox_producer, outbox_consumer) exactly as the deploy-time migrate function does; needs a user that may create roles',
    )
    .option('--json', 'print one JSON document: {"applied": [names], "roles": [names]}')
    .action(async (opts: { roles?: boolean; json?: boolean }) => {
      const url = databaseUrlFromEnv(io.env);
      const applied = opts.roles ? await migrateWithRoles(url) : await migrate(url, { log: () => {} });
      const roles = opts.roles ? Object.values(DEFAULT_ROLES) : [];
      if (opts.json) {
        json(opts.roles ? { applied, roles } : { applied });
        return;
      }
      io.out(
        applied.length === 0
          ? 'schema is up to date'
          : `applied ${applied.length} migration(s): ${applied.join(', ')}`,
      );
      if (opts.roles) io.out(`roles ensured: ${roles.join(', ')}`);
    });

  program
    .command('relay')
    .description('publish outbox rows to EventBridge until stopped (Ctrl-C)')
    .addOption(
      new Option('--once', 'run a single claim-publish-mark pass, then exit').conflicts('untilEmpty'),
    )
    .option(
      '--until-empty',
      'exit once no pending row is left that a relay can claim (exit 1 if events wait behind dead letters under OUTBOX_DEAD_LETTER_POLICY=block)',
    )
    .option('--quiet', 'print only the final summary')
    .option('--json', 'print the final summary as one JSON document')
    .action(async (opts: { once?: boolean; untilEmpty?: boolean; quiet?: boolean; json?: boolean }) => {
      const settings = loadRelaySettings(io.env);
      // A pool the relay can replace when a connection breaks or stops answering; made (and its
      // settings validated) before anything that keeps the process alive is set up.
      const pool = openPool({ env: io.env, applicationName: 'outbox-cli' });
      ignoreTransientDriverRejections((message) => io.err(`relay: ${message}`));
      const client = createEventBridgeClient();
      try {
        await checkEventBridgeClient(client);
      } catch (error) {
        await pool.end();
        throw error;
      }
      const oneShot = Boolean(opts.once || opts.untilEmpty);
      const abort = new AbortController();
      const removeInterruptHandlers = onInterrupt(
        () => {
          io.err('relay: stopping after the current pass (Ctrl-C again to force)');
          abort.abort();
        },
        () => process.exit(130),
      );
      const report = new RelayReport(io.err, { quiet: opts.quiet });
      let failedPassesInRow = 0;
      let gaveUp = false;
      let explainedDatabase = false;
      const started = performance.now();
      const ticker = setInterval(() => report.tick(), REPORT_EVERY_MS);
      try {
        {
          const result = await runRelay({
            sql: pool,
            client,
            settings,
            signal: abort.signal,
            once: opts.once,
            untilEmpty: opts.untilEmpty,
            // A one-shot run gives up on an unreachable database (exit 1) instead of retrying forever.
            maxConsecutiveErrors: oneShot ? 5 : undefined,
            onTransientError: (error, consecutive) => {
              if (abort.signal.aborted || (opts.quiet && consecutive > 1)) return;
              io.err(
                `relay: database unavailable (${(error as { code?: string }).code ?? 'error'}), retrying…`,
              );
              if (!explainedDatabase && isConnectFailure(error)) {
                // Once per run: where it tried to connect, why it failed and what to do.
                explainedDatabase = true;
                io.err(`  ${describeConnectionFailure(error, io.env)}\n  ${LOCAL_DATABASE_HINT}`);
              }
            },
            onFailure: (f) => report.failure(f),
            onPass: (c) => {
              report.pass(c);
              if (c.published > 0) failedPassesInRow = 0;
              else if (c.retried + c.deadLettered > 0) failedPassesInRow++;
              if (
                opts.untilEmpty &&
                failedPassesInRow >= GIVE_UP_AFTER_FAILED_PASSES &&
                !abort.signal.aborted
              ) {
                gaveUp = true;
                io.err(
                  `relay: giving up after ${GIVE_UP_AFTER_FAILED_PASSES} passes in a row in which every event failed`,
                );
                abort.abort();
              }
            },
          });
          // Drained of everything claimable: under `block`, events may still wait behind dead
          // letters, which only an operator can release; say so rather than report an empty outbox.
          let heldBack: HeldBack | undefined;
          if (opts.untilEmpty && result.stopReason === 'empty') {
            heldBack = await withDeadline(
              countHeldBack(pool.sql, settings),
              'count held-back events',
              STATEMENT_DEADLINE_MS,
            );
          }
          const seconds = (performance.now() - started) / 1000;
          const stopReason = gaveUp ? 'gave up' : heldBack?.events ? 'held back' : result.stopReason;
          const failures = report.failures();
          if (opts.json) {
            json({
              stopReason,
              seconds: Number(seconds.toFixed(3)),
              published: result.published,
              retried: result.retried,
              deadLettered: result.deadLettered,
              leaseLost: result.leaseLost,
              eventsPerSecond: Math.round(result.published / Math.max(seconds, 0.001)),
              failures,
              ...(heldBack ? { heldBack } : {}),
            });
          } else {
            io.out(
              `relay stopped (${stopReason}) after ${seconds.toFixed(2)} s: ` +
                `published ${result.published}, retried ${result.retried}, dead-lettered ${result.deadLettered}, ` +
                `lease lost ${result.leaseLost}, ${(result.published / Math.max(seconds, 0.001)).toFixed(0)} events/s`,
            );
            if (failures.length > 0) {
              io.out('failures by reason:');
              for (const line of report.summaryLines()) io.out(line);
            }
          }
          if (oneShot && result.published === 0 && result.retried + result.deadLettered > 0) {
            io.err(
              [
                'error: nothing was published: every attempt failed (the reasons are above).',
                ...(result.retried > 0 ? ['Retried events stay in the outbox for the next run.'] : []),
                ...(result.deadLettered > 0 ? ['Dead letters: `outbox dead-letters list`.'] : []),
                ...endpointHint(failures, io.env),
              ].join(' '),
            );
            code = EXIT.failure;
          } else if (gaveUp) {
            // --until-empty promises an empty outbox; giving up with events still pending is not that.
            io.err(
              'error: the outbox is not empty: events still pending failed on every attempt (the reasons are above).',
            );
            code = EXIT.failure;
          }
          if (heldBack?.events) {
            io.err(
              `error: ${heldBack.events} event(s) of ${heldBack.aggregates} aggregate(s) wait behind dead letters ` +
                '(OUTBOX_DEAD_LETTER_POLICY=block): nothing else is left to claim, and they go only once their ' +
                'dead letters are replayed or discarded: `outbox dead-letters list`.',
            );
            code = EXIT.failure;
          }
        }
      } finally {
        clearInterval(ticker);
        removeInterruptHandlers();
        await pool.end();
      }
    });

  program
    .command('enqueue')
    .description(
      'enqueue events from JSON lines on stdin (backfills); all lines are validated before any is written',
    )
    .option('--source <source>', 'Source for lines without one (default: $OUTBOX_DEFAULT_SOURCE)')
    .option('--batch-size <n>', 'events per transaction', positiveInteger, 1000)
    .option('--json', 'print one JSON document: {"enqueued", "duplicates", "errors"}')
    .action(async (opts: { source?: string; batchSize: number; json?: boolean }) => {
      // The bus's request limit bounds an entry too: what the relay could not send is refused here.
      const maxEntryBytes = loadRelaySettings({ EVENT_BUS_NAME: 'unused', ...io.env }).maxRequestBytes;
      await withDb(async (sql) => {
        let lastProgressAt = performance.now();
        const result = await enqueueFromLines(sql, io.stdin, {
          defaultSource: opts.source ?? io.env.OUTBOX_DEFAULT_SOURCE,
          maxEntryBytes,
          batchSize: opts.batchSize,
          reading: (lines) => io.err(`enqueue: ${lines} lines read and checked…`),
          progress: (p: EnqueueProgress) => {
            // One transaction's worth is reported by the summary alone; longer work gets a line
            // a second and one at the end.
            if (p.total <= opts.batchSize) return;
            const now = performance.now();
            if (p.done < p.total && now - lastProgressAt < ENQUEUE_PROGRESS_EVERY_MS) return;
            lastProgressAt = now;
            io.err(
              `enqueue: ${p.done} of ${p.total} events done: ${p.enqueued} enqueued, ${p.duplicates} duplicate(s) skipped`,
            );
          },
        });
        if (result.errors.length > 0) {
          for (const e of result.errors) io.err(`line ${e.line}: ${e.message}`);
          io.err(`enqueue: ${result.errors.length} invalid line(s); nothing was written`);
          if (opts.json) json(result);
          code = EXIT.failure;
          return;
        }
        if (opts.json) json(result);
        else io.out(`enqueued ${result.enqueued} event(s), ${result.duplicates} duplicate(s) skipped`);
      });
    });

  program
    .command('status')
    .description(
      'show the backlog: pending, oldest pending age, in flight, dead-lettered, published, parked inbox events',
    )
    .option('--json', 'print one JSON document')
    .action(async (opts: { json?: boolean }) => {
      await withDb(async (sql) => {
        const s = await getStatus(sql);
        if (opts.json) {
          json(s);
          return;
        }
        io.out(`pending:             ${s.pending}`);
        io.out(`oldest pending age:  ${s.oldestPendingAgeSeconds.toFixed(1)} s`);
        io.out(`in flight:           ${s.inFlight}`);
        io.out(`dead-lettered:       ${s.deadLettered}`);
        io.out(`published:           ${s.published}`);
        io.out(`inbox parked:        ${s.inboxParked}`);
      });
    });

  const operations: OperationsContext = {
    out: io.out,
    err: io.err,
    json,
    env: io.env,
    withDb,
    confirm: io.confirm,
    setExitCode: (c) => {
      code = c;
    },
  };
  registerOperations(program, operations);
  registerInbox(program, operations);

  try {
    await program.parseAsync(argv);
    return code;
  } catch (error) {
    // Commander has printed its own message (unknown option, invalid value, missing argument…).
    if (error instanceof CommanderError) return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    const { message, exitCode } = explainError(error, io.env);
    io.err(`error: ${message}`);
    return exitCode;
  }
}
