/**
 * `npm run db [-- start|stop|status|remove|url] [--port N]`: a local Postgres for the CLI that keeps
 * its data between runs (see local-db.ts).
 *
 * `start` (the default) prints `export DATABASE_URL=…` on stdout and everything else on stderr, so
 * `eval "$(npm run -s db)"` starts the database and sets the variable in one go.
 */
import { parseArgs } from 'node:util';
import { LocalDbError, localDbStatus, removeLocalDb, startLocalDb, stopLocalDb } from './local-db.ts';

const USAGE = `usage: npm run db [-- start|stop|status|remove|url] [--port N]

  start    create the local Postgres if needed, start it, print its DATABASE_URL (default)
  stop     stop it; the data stays              (also: npm run db:stop)
  status   say whether it exists and runs
  remove   stop it and delete its data          (also: npm run db:remove)
  url      print its DATABASE_URL only

  --port N   port of a new database (default 54329, else any free port)
  OUTBOX_LOCAL_DB_DIR   where it lives (default: .pgdata/ in the checkout)`;

const err = (line: string) => process.stderr.write(`${line}\n`);
const out = (line: string) => process.stdout.write(`${line}\n`);

async function main(): Promise<number> {
  let parsed: ReturnType<typeof parse>;
  try {
    parsed = parse();
  } catch (error) {
    err(`error: ${(error as Error).message}\n${USAGE}`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    out(USAGE);
    return 0;
  }
  const command = positionals[0] ?? 'start';
  if (positionals.length > 1 || !['start', 'stop', 'status', 'remove', 'url'].includes(command)) {
    err(`error: unknown command ${JSON.stringify(positionals.join(' '))}\n${USAGE}`);
    return 2;
  }
  let port: number | undefined;
  if (values.port !== undefined) {
    port = Number(values.port);
    if (!/^\d+$/.test(values.port) || port < 1024 || port > 65_535) {
      err(`error: --port must be a whole number from 1024 to 65535 (got ${JSON.stringify(values.port)})`);
      return 2;
    }
  }

  switch (command) {
    case 'start': {
      const s = await startLocalDb({ port, log: (line) => err(`db: ${line}`) });
      const state = s.created ? 'created and started' : s.started ? 'started' : 'already running';
      err(
        `db: local Postgres ${s.version ?? ''} ${state} on 127.0.0.1, data in ${s.home.home} (kept until db:remove)`,
      );
      err(
        `db: stop it with \`npm run db:stop\`, delete it with \`npm run db:remove\`; its log: ${s.home.log}`,
      );
      // Under `eval "$(npm run -s db)"` stdout is a pipe and the shell exports the line itself.
      if (process.stdout.isTTY)
        err('db: for the CLI in this shell, export its URL (or run: eval "$(npm run -s db)"):');
      out(`export DATABASE_URL=${s.url}`);
      return 0;
    }
    case 'url': {
      const s = await localDbStatus();
      if (!s.url) {
        err('error: there is no local database yet: run `npm run db` to create and start it');
        return 1;
      }
      out(s.url);
      return 0;
    }
    case 'status': {
      const s = await localDbStatus();
      if (!s.exists) out(`no local database (it would live in ${s.home.home}); \`npm run db\` creates it`);
      else
        out(
          `local Postgres ${s.version ?? ''} in ${s.home.home}: ${s.running ? 'running' : 'stopped (`npm run db` starts it)'}\n` +
            `DATABASE_URL=${s.url}`,
        );
      return 0;
    }
    case 'stop': {
      const stopped = await stopLocalDb();
      out(
        stopped
          ? 'local Postgres stopped; its data stays (`npm run db` starts it again)'
          : 'local Postgres is not running',
      );
      return 0;
    }
    case 'remove': {
      const home = (await localDbStatus()).home.home;
      const removed = await removeLocalDb();
      out(
        removed ? `local Postgres stopped and ${home} deleted` : `nothing to delete: ${home} does not exist`,
      );
      return 0;
    }
  }
  return 2;
}

function parse() {
  return parseArgs({
    args: process.argv.slice(2),
    allowPositionals: true,
    options: { port: { type: 'string' }, help: { type: 'boolean', short: 'h' } },
  });
}

main()
  .then((code) => {
    process.exitCode = code;
  })
  .catch((error: unknown) => {
    err(
      `error: ${error instanceof LocalDbError ? error.message : ((error as Error).stack ?? String(error))}`,
    );
    process.exitCode = 1;
  });
