/**
 * What both command lines share: `outbox` (the relay package: shared/relay/cli/main.ts) and
 * `outbox-inbox` (the consumer package: shared/consumer/cli/main.ts). Where a command writes
 * ({@link CliIo}), what every command gets ({@link OperationsContext}: output, the environment, a
 * database, the exit code), the program's version, help and output conventions, and how a run ends
 * (commander's usage errors exit 2, any other error is explained by {@link explainError}).
 *
 * Conventions: results on stdout, progress and errors on stderr; `--json` prints exactly one JSON
 * document on stdout (an object, or an array for lists) and nothing else there; exit 0 success,
 * 1 failure, 2 usage or configuration error (see {@link EXIT}).
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { createInterface } from 'node:readline/promises';
import { fileURLToPath } from 'node:url';
import { Command, CommanderError } from 'commander';
import { databasePasswords, redactPasswords } from '../connection-url.ts';
import { connect, OUTBOX_SEARCH_PATH, type Sql } from '../db.ts';
import { EXIT, explainError } from './errors.ts';

/** Where the CLI writes; tests pass their own. */
export interface CliIo {
  out: (line: string) => void;
  err: (line: string) => void;
  stdin: AsyncIterable<string | Buffer>;
  env: NodeJS.ProcessEnv;
  /** Asks a yes/no question on the terminal; false when there is none. */
  confirm: (question: string) => Promise<boolean>;
}

let stdoutWatched = false;

/**
 * Ends the process quietly, exit 0, once stdout's reader has gone (`outbox status | head -1`):
 * the write that meets the closed pipe fails with EPIPE, which Node reports as an unhandled
 * 'error' event, a stack trace. A reader that stopped reading wants no more output, as `head`'s
 * other writers (cat, grep) take it; what the command had to do after that line is given up, as a
 * writer killed by SIGPIPE gives it up. Any other error of stdout is thrown as before.
 */
function endQuietlyWhenStdoutCloses(): void {
  if (stdoutWatched) return;
  stdoutWatched = true;
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code === 'EPIPE') process.exit(EXIT.ok);
    throw error;
  });
}

/** The process's own streams, environment and terminal; a closed stdout ends the process quietly. */
export const defaultIo = (): CliIo => {
  endQuietlyWhenStdoutCloses();
  return {
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
  };
};

/** What the operator commands need from the CLI. */
export interface OperationsContext {
  out: (line: string) => void;
  err: (line: string) => void;
  /** Prints one JSON document on stdout: the `--json` convention of every command. */
  json: (value: unknown) => void;
  env: NodeJS.ProcessEnv;
  withDb: (fn: (sql: Sql) => Promise<void>) => Promise<void>;
  /** Asks a yes/no question; false when there is no terminal to ask. */
  confirm: (question: string) => Promise<boolean>;
  setExitCode: (code: number) => void;
}

/** What every command gets: where to write, the environment, a database, the exit code, stdin. */
export interface CommandContext extends OperationsContext {
  stdin: CliIo['stdin'];
}

/** The package's version: from the nearest package.json above this file (source or built layout). */
export function packageVersion(): string {
  for (let dir = dirname(fileURLToPath(import.meta.url)); dir !== dirname(dir); dir = dirname(dir)) {
    const file = join(dir, 'package.json');
    if (existsSync(file))
      return (JSON.parse(readFileSync(file, 'utf8')) as { version?: string }).version ?? '0.0.0';
  }
  return '0.0.0';
}

/**
 * The last line of defence: no line printed, whatever produced it (a driver's message included),
 * carries a database password. Messages built here never hold one (maskDatabaseUrl).
 */
function redacted(cliIo: CliIo): CliIo {
  const passwords = databasePasswords(cliIo.env);
  return {
    ...cliIo,
    out: (line) => cliIo.out(redactPasswords(line, passwords)),
    err: (line) => cliIo.err(redactPasswords(line, passwords)),
  };
}

/** What every command gets (its lines redacted): where to write, the environment, a database, the exit code. */
export function commandContext(cliIo: CliIo, setExitCode: (code: number) => void): CommandContext {
  const io = redacted(cliIo);
  return {
    stdin: io.stdin,
    out: io.out,
    err: io.err,
    json: (value) => io.out(JSON.stringify(value)),
    env: io.env,
    withDb: async (fn: (sql: Sql) => Promise<void>) => {
      const sql = connect({ env: io.env, applicationName: 'outbox-cli', searchPath: OUTBOX_SEARCH_PATH });
      try {
        await fn(sql);
      } finally {
        await sql.end({ timeout: 5 });
      }
    },
    confirm: io.confirm,
    setExitCode,
  };
}

/** The help's lines on the database variables, which every command reads. */
export const DATABASE_HELP = `  DATABASE_URL                  postgres://user:password@host:5432/database (else libpq's PGHOST, PGPORT,
                                PGUSER, PGPASSWORD, PGDATABASE; with OUTBOX_DB_IAM_AUTH=true the PG* ones
                                and an IAM token)`;

/** The help's last lines: the output and exit conventions. */
export const CONVENTIONS_HELP = `Output: results on stdout, progress and errors on stderr; --json prints one JSON document.
Exit status: 0 success, 1 failure, 2 usage or configuration error.`;

/** A program named `name`: its version, help and output conventions, its output through `ctx`. */
export function createProgram(name: string, description: string, ctx: OperationsContext): Command {
  return new Command(name)
    .description(description)
    .version(packageVersion(), '-V, --version', 'print the version')
    .exitOverride()
    .showHelpAfterError('(add --help for usage)')
    .configureOutput({ writeOut: (s) => ctx.out(s.trimEnd()), writeErr: (s) => ctx.err(s.trimEnd()) });
}

/**
 * Parses `argv` and runs the command it names.
 * @returns the exit code: `exitCode()` once the command ran, 2 for commander's usage errors (it
 *   printed its own message), else the explained error's (printed on stderr)
 */
export async function runProgram(
  program: Command,
  argv: string[],
  ctx: OperationsContext,
  exitCode: () => number,
): Promise<number> {
  try {
    await program.parseAsync(argv);
    return exitCode();
  } catch (error) {
    // Commander has printed its own message (unknown option, invalid value, missing argument…).
    if (error instanceof CommanderError) return error.exitCode === 0 ? EXIT.ok : EXIT.usage;
    const { message, exitCode: code } = explainError(error, ctx.env);
    ctx.err(`error: ${message}`);
    return code;
  }
}
