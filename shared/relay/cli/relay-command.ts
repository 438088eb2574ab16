/**
 * `outbox relay`: the relay of `createRelay`, looping until Ctrl-C, or one-shot (`--once`,
 * `--until-empty`), with progress lines on stderr and a summary on stdout. Its steps: start the
 * relay (settings, pool, client checked), run it with its report, then summarise and decide the
 * exit code.
 */
import { type Command, Option } from 'commander';
import { connectionHint, EXIT } from '../../platform/cli/errors.ts';
import type { OperationsContext } from '../../platform/cli/program.ts';
import { onInterrupt } from '../../platform/cli/signals.ts';
import {
  currentSql,
  describeConnectionFailure,
  ignoreTransientDriverRejections,
  isConnectFailure,
  withDeadline,
} from '../../platform/index.ts';
import { createRelay, type Relay, type RelayRunResult } from '../index.ts';
import { STATEMENT_DEADLINE_MS } from '../pass-deadlines.ts';
import { countHeldBack, type HeldBack } from '../sql/index.ts';
import { type FailureReason, REPORT_EVERY_MS, RelayReport } from './relay-report.ts';

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
        `The bus endpoint did not answer: is ${variable}=${endpoint} right, and is it running (\`npx outbox bus\` for the local one)?`,
      ]
    : ['The bus endpoint did not answer: check AWS_REGION and the network path to EventBridge.'];
}

/** The options of `outbox relay`. */
interface RelayCommandOptions {
  once?: boolean;
  untilEmpty?: boolean;
  quiet?: boolean;
  json?: boolean;
}

/** What a run of the command ended with, beside the relay's own result. */
interface RunOutcome {
  result: RelayRunResult;
  seconds: number;
  gaveUp: boolean;
  /** Stopped by Ctrl-C (or SIGTERM): the loop's `aborted`, which the summary calls `interrupted`. */
  interrupted: boolean;
  heldBack?: HeldBack;
  report: RelayReport;
}

/** Adds `relay` to the program. */
export function registerRelay(program: Command, ctx: OperationsContext): void {
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
    .action(async (opts: RelayCommandOptions) => {
      const relay = await startRelay(ctx);
      try {
        const outcome = await runWithReport(relay, opts, ctx);
        printSummary(outcome, opts, ctx);
        ctx.setExitCode(exitCodeOf(outcome, opts, ctx));
      } finally {
        await relay.close();
      }
    });
}

/**
 * Builds the relay from the environment and checks that its client can sign requests. The pool is
 * made (and its settings validated) before anything that keeps the process alive is set up.
 * @throws {OutboxConfigError} naming the variable; the pool is closed first
 */
async function startRelay(ctx: OperationsContext): Promise<Relay> {
  const relay = createRelay({ env: ctx.env, applicationName: 'outbox-cli' });
  ignoreTransientDriverRejections((message) => ctx.err(`relay: ${message}`));
  try {
    await relay.check();
  } catch (error) {
    await relay.close();
    throw error;
  }
  return relay;
}

/** Runs the relay with Ctrl-C handling, progress lines and the one-shot give-up rule. */
async function runWithReport(
  relay: Relay,
  opts: RelayCommandOptions,
  ctx: OperationsContext,
): Promise<RunOutcome> {
  const oneShot = Boolean(opts.once || opts.untilEmpty);
  const abort = new AbortController();
  let interrupted = false;
  const removeInterruptHandlers = onInterrupt(
    () => {
      interrupted = true;
      ctx.err('relay: stopping after the current pass (Ctrl-C again to force)');
      abort.abort();
    },
    () => process.exit(130),
  );
  const report = new RelayReport(ctx.err, { quiet: opts.quiet });
  let failedPassesInRow = 0;
  let gaveUp = false;
  let explainedDatabase = false;
  const started = performance.now();
  const ticker = setInterval(() => report.tick(), REPORT_EVERY_MS);
  try {
    const result = await relay.run({
      signal: abort.signal,
      once: opts.once,
      untilEmpty: opts.untilEmpty,
      // A one-shot run gives up on an unreachable database (exit 1) instead of retrying forever.
      maxConsecutiveErrors: oneShot ? 5 : undefined,
      onTransientError: (error, consecutive) => {
        if (abort.signal.aborted || (opts.quiet && consecutive > 1)) return;
        ctx.err(`relay: database unavailable (${(error as { code?: string }).code ?? 'error'}), retrying…`);
        if (!explainedDatabase && isConnectFailure(error)) {
          // Once per run: where it tried to connect, why it failed and what to do.
          explainedDatabase = true;
          ctx.err(`  ${describeConnectionFailure(error, ctx.env)}\n  ${connectionHint(ctx.env)}`);
        }
      },
      onFailure: (f) => report.failure(f),
      onPass: (c) => {
        report.pass(c);
        if (c.published > 0) failedPassesInRow = 0;
        else if (c.retried + c.deadLettered > 0) failedPassesInRow++;
        if (opts.untilEmpty && failedPassesInRow >= GIVE_UP_AFTER_FAILED_PASSES && !abort.signal.aborted) {
          gaveUp = true;
          ctx.err(
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
        countHeldBack(currentSql(relay.sql), relay.settings),
        'count held-back events',
        STATEMENT_DEADLINE_MS,
      );
    }
    return { result, seconds: (performance.now() - started) / 1000, gaveUp, interrupted, heldBack, report };
  } finally {
    clearInterval(ticker);
    removeInterruptHandlers();
  }
}

/** The summary on stdout: one line (and the failures by reason), or one JSON document. */
function printSummary(outcome: RunOutcome, opts: RelayCommandOptions, ctx: OperationsContext): void {
  const { result, seconds, gaveUp, interrupted, heldBack, report } = outcome;
  const stopReason = gaveUp ? 'gave up' : heldBack?.events ? 'held back' : result.stopReason;
  const failures = report.failures();
  if (opts.json) {
    ctx.json({
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
    return;
  }
  // An operator's Ctrl-C is how a looping relay ends: "aborted" read as a failure. The JSON keeps
  // the loop's own `aborted`, which programs may already test for.
  const said = interrupted && stopReason === 'aborted' ? 'interrupted' : stopReason;
  ctx.out(
    `relay stopped (${said}) after ${seconds.toFixed(2)} s: ` +
      `published ${result.published}, retried ${result.retried}, dead-lettered ${result.deadLettered}, ` +
      `lease lost ${result.leaseLost}, ${(result.published / Math.max(seconds, 0.001)).toFixed(0)} events/s`,
  );
  if (failures.length > 0) {
    ctx.out('failures by reason:');
    for (const line of report.summaryLines()) ctx.out(line);
  }
}

/**
 * The exit code, with the error lines that explain a failure: 1 when a one-shot run published
 * nothing because everything failed, when it gave up, or when events wait behind dead letters.
 */
function exitCodeOf(outcome: RunOutcome, opts: RelayCommandOptions, ctx: OperationsContext): number {
  const { result, gaveUp, heldBack, report } = outcome;
  let code: number = EXIT.ok;
  const oneShot = Boolean(opts.once || opts.untilEmpty);
  if (oneShot && result.published === 0 && result.retried + result.deadLettered > 0) {
    ctx.err(
      [
        'error: nothing was published: every attempt failed (the reasons are above).',
        ...(result.retried > 0 ? ['Retried events stay in the outbox for the next run.'] : []),
        ...(result.deadLettered > 0 ? ['Dead letters: `outbox dead-letters list`.'] : []),
        ...endpointHint(report.failures(), ctx.env),
      ].join(' '),
    );
    code = EXIT.failure;
  } else if (gaveUp) {
    // --until-empty promises an empty outbox; giving up with events still pending is not that.
    ctx.err(
      'error: the outbox is not empty: events still pending failed on every attempt (the reasons are above).',
    );
    code = EXIT.failure;
  }
  if (heldBack?.events) {
    ctx.err(
      `error: ${heldBack.events} event(s) of ${heldBack.aggregates} aggregate(s) wait behind dead letters ` +
        '(OUTBOX_DEAD_LETTER_POLICY=block): nothing else is left to claim, and they go only once their ' +
        'dead letters are replayed or discarded: `outbox dead-letters list`.',
    );
    code = EXIT.failure;
  }
  return code;
}
