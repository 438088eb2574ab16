/**
 * The rehearsal's on-call part: the lag runbook (docs/operations.md#lag) followed against the
 * rehearsed deployment, with the commands and the environment operations.md gives. The operator's
 * environment is built from the "Run it" step of docs/operations.md#connect-the-cli-to-the-deployed-database
 * (the variables it exports, valued from the template's outputs as `aws cloudformation
 * describe-stacks` would print them), and `outbox status` (the repository's `outbox` bin, what
 * `npx outbox` runs) logs in as the monitor's user with an IAM token through the proxy stand-in,
 * over TLS. Three causes of lag, each set up on its own and cleaned up after:
 *
 * - a `block` dead letter with events behind it on its aggregate (the relay bundle with
 *   `OUTBOX_DEAD_LETTER_POLICY=block`, the bus refusing the first event for good): `outbox status`
 *   counts them held back and names the dead letter, and `outbox dead-letters show <id>` (as the
 *   relay's user) gives its error;
 * - no route to EventBridge (the relay bundle with a bus endpoint that takes the connection and
 *   never answers): the relay's log says why events fail, its `BackPressure` metric grows, and
 *   `outbox status` shows the events in backoff and pending growing;
 * - a backlog: `outbox status` shows it pending and what the monitor would scale to, the monitor
 *   bundle starts that many extra relays, and pending falls from one `outbox status` to the next.
 */
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { createServer, type Socket } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';
import type { Sql } from 'postgres';
import type { LocalBus } from '../../shared/local/bus.ts';
import type { InvocationOutcome, RunningFunction } from '../../shared/local/lambda-runtime/lambda-process.ts';
import { LambdaService } from '../../shared/local/lambda-runtime/lambda-service.ts';
import type { SynthesisedStack, TemplateFunction } from '../../shared/local/lambda-runtime/template.ts';
import { EnvVar, RELAY_INVOCATION_END } from '../../shared/platform/index.ts';
import { enqueueMany } from '../../shared/producer/index.ts';
import type { BacklogDetail, OutboxStatus } from '../../shared/relay/operations/index.ts';
import type { LoginRecord } from './iam-proxy.ts';

const exec = promisify(execFile);
const root = fileURLToPath(new URL('../..', import.meta.url));
/** The `outbox` bin: what `npx outbox` runs where the package is installed. */
const OUTBOX_BIN = join(root, 'shared', 'relay', 'bin', 'outbox.js');
/** The source of the events this part commits (deleted after each scenario). */
const SOURCE = 'rehearsal.runbook';
/**
 * A relay invocation's timeout here, ms: long enough for one pass's lease and the end margin
 * (it claims while they fit), so each invocation relays for about 2 s.
 */
const RELAY_TIMEOUT_MS = RELAY_INVOCATION_END.minLeaseSeconds * 1000 + RELAY_INVOCATION_END.marginMs + 2_000;

/** What run.ts provides. */
export interface RunbookContext {
  stack: SynthesisedStack;
  relay: TemplateFunction;
  monitor: TemplateFunction;
  region: string;
  /** The run's CA, standing for the public roots the proxy's certificate chains to. */
  caFile: string;
  /** A connection as the database's owner (to set up and clean up the scenarios). */
  db: Sql;
  bus: LocalBus;
  /** Logins the proxy stand-in saw. */
  logins: LoginRecord[];
  /** The Lambda runtime's environment around the template's (run.ts's runtimeEnv). */
  runtimeEnv: Record<string, string>;
  /** The function as deployed (asset paths, the CA bundle). */
  asDeployed(f: TemplateFunction): TemplateFunction;
  /** Starts a function (its environment and the runtime's amended); stopped by run.ts. */
  start(
    f: TemplateFunction,
    overrides?: { environment?: Record<string, string>; runtime?: Record<string, string> },
  ): Promise<RunningFunction>;
  invoke(
    fn: RunningFunction,
    f: TemplateFunction,
    event: unknown,
    timeoutMs: number,
  ): Promise<InvocationOutcome>;
  /** Where the Lambda Invoke endpoint hands the relay function's invocations (the monitor's scale-out). */
  onRelayInvoked(handler: ((payload: unknown) => void) | undefined): void;
  scale: number;
  describe(o: InvocationOutcome): string;
  check(ok: boolean, name: string, detail?: string): boolean;
  info(line: string): void;
  cleanups: (() => Promise<unknown>)[];
}

/** `outbox status --json`: the status and its backlog detail, as the operations module types them. */
type StatusJson = OutboxStatus & BacklogDetail;

/** Runs the lag runbook's steps; each is a check. */
export async function rehearseRunbook(c: RunbookContext): Promise<void> {
  const started = performance.now();
  let lapStarted = started;
  const lap = () => {
    const now = performance.now();
    const took = `${((now - lapStarted) / 1000).toFixed(1)} s`;
    lapStarted = now;
    return took;
  };
  // 1. The operator's environment: the variables "Run it" exports, from the stack's outputs.
  const operator = await operatorEnvironment(c);
  if (
    !c.check(
      operator.problems.length === 0,
      'runbook: the connect section\'s "Run it" variables all come from the stack\'s outputs',
      operator.problems.join('; ') ||
        Object.entries(operator.env)
          .map(([k, v]) => `${k}=${v}`)
          .join(' '),
    )
  )
    return;
  const base: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? '',
    // The person's own AWS credentials (no password anywhere), stand-ins here.
    AWS_ACCESS_KEY_ID: 'ASIAOPERATOR',
    AWS_SECRET_ACCESS_KEY: 'operator-secret',
    AWS_SESSION_TOKEN: 'operator-session',
    AWS_EC2_METADATA_DISABLED: 'true',
    // Step 5 (TLS): the proxy's certificate chains to roots Node trusts; the run's CA stands for them.
    NODE_EXTRA_CA_CERTS: c.caFile,
    ...operator.env,
  };
  const outbox = async (args: string[], env: Record<string, string> = {}) => {
    try {
      const { stdout, stderr } = await exec(process.execPath, [OUTBOX_BIN, ...args], {
        env: { ...base, ...env },
        timeout: 60_000,
      });
      return { code: 0, stdout, stderr };
    } catch (error) {
      const e = error as { code?: number; stdout?: string; stderr?: string; message?: string };
      return { code: e.code ?? 1, stdout: e.stdout ?? '', stderr: e.stderr ?? e.message ?? '' };
    }
  };
  const statusJson = async (env: Record<string, string> = {}) => {
    const r = await outbox(['status', '--json'], env);
    if (r.code !== 0) throw new Error(`outbox status --json exited ${r.code}: ${r.stderr.trim()}`);
    return JSON.parse(r.stdout) as StatusJson;
  };
  const statusText = async (env: Record<string, string> = {}) => {
    const r = await outbox(['status'], env);
    if (r.code !== 0) throw new Error(`outbox status exited ${r.code}: ${r.stderr.trim()}`);
    return r.stdout;
  };
  const line = (text: string, label: string) =>
    text.split('\n').find((l) => l.startsWith(`${label}:`)) ?? `(no ${label} line)`;
  const cleanUp = async () => {
    await c.db`delete from outbox.outbox where source = ${SOURCE}`;
    await c.db`delete from outbox.outbox_aggregate where aggregate_type like 'runbook-%'`;
  };
  const commit = (
    aggregateType: string,
    n: number,
    aggregates: number,
    payload: (i: number) => Record<string, unknown>,
  ) =>
    c.db.begin((tx) =>
      enqueueMany(
        tx,
        Array.from({ length: n }, (_, i) => ({
          type: 'RunbookProbe',
          source: SOURCE,
          aggregateType,
          aggregateId: String(i % aggregates),
          payload: payload(i),
        })),
      ),
    );

  // 2. `outbox status` as the monitor's user: an IAM token through the proxy, over TLS.
  const loginsBefore = c.logins.length;
  const baseline = await statusJson();
  const cliLogins = c.logins.slice(loginsBefore);
  const monitorUser = operator.env.PGUSER ?? '';
  c.check(
    cliLogins.length > 0 &&
      cliLogins.every(
        (l) => l.accepted && l.user === monitorUser && l.parameters.application_name === 'outbox-cli',
      ),
    'runbook: outbox status logs in as the monitor user with an IAM token, through the proxy, over TLS',
    `${cliLogins.length} login(s): ${cliLogins.map((l) => `${l.user} (${l.parameters.application_name}) ${l.accepted ? 'accepted' : `refused: ${l.reason}`}`).join(', ')}; pending ${baseline.pending}, in backoff ${baseline.inBackoff}, held back ${baseline.heldBack}`,
  );

  // 3. Events held back behind a dead letter (runbook step 5), under a relay with `block`: the
  // demo deploys `continue`, so the relay and the StatusEnvironment read `block` as a deployment
  // with `relaySettings: { deadLetterPolicy: 'block' }` has them.
  const policy = 'block';
  const blockStatusEnv = { [EnvVar.deadLetterPolicy]: policy };
  const poison = `runbook-poison-${Date.now()}`;
  const chain = await commit('runbook-block', 6, 1, (i) => (i === 0 ? { note: poison } : { i }));
  c.bus.setFaults({ poisonMarker: poison, poisonCode: 'InvalidArgument' });
  const blockRelay = await c.start(c.relay, { environment: { [EnvVar.deadLetterPolicy]: policy } });
  const blocked = await c.invoke(blockRelay, c.relay, {}, RELAY_TIMEOUT_MS);
  c.bus.setFaults({});
  await blockRelay.stop();
  const [letter] = await c.db<{ id: string; last_error: string }[]>`
    select id::text, last_error from outbox.outbox
    where source = ${SOURCE} and event_id = ${chain[0]?.eventId ?? ''} and dead_lettered_at is not null`;
  // What the runbook runs next is run beside it: `outbox dead-letters show <id>` as the relay's
  // user (it reads the payload).
  const [held, heldText, listed, shown] = await Promise.all([
    statusJson(blockStatusEnv),
    statusText(blockStatusEnv),
    outbox(['dead-letters', 'list', '--json']),
    outbox(['dead-letters', 'show', letter?.id ?? '0'], { PGUSER: operator.relayUser }),
  ]);
  const listedRows =
    listed.code === 0 ? (JSON.parse(listed.stdout) as { id: string; lastError?: string }[]) : [];
  const holder = held.heldBackBy.find((h) => h.aggregateType === 'runbook-block');
  c.check(
    blocked.type === 'result' &&
      letter !== undefined &&
      held.heldBack - baseline.heldBack === 5 &&
      holder?.id === letter.id &&
      holder.heldBack === 5 &&
      holder.eventId === chain[0]?.eventId &&
      held.inBackoff === baseline.inBackoff &&
      heldText.includes(`5 behind dead letter ${letter.id} `) &&
      heldText.includes(`outbox dead-letters show ${letter.id}`),
    `runbook: a ${policy} dead letter with 5 events behind it: outbox status counts them held back and names it`,
    `relay ${c.describe(blocked).slice(0, 160)}; heldBack ${held.heldBack}, heldBackBy ${JSON.stringify(holder ?? held.heldBackBy)}; "${line(heldText, 'held back')}"`,
  );
  c.check(
    listedRows.some((r) => r.id === letter?.id) &&
      shown.code === 0 &&
      shown.stdout.includes('InvalidArgument') &&
      shown.stdout.includes(poison),
    "runbook: outbox dead-letters list (as the monitor's user) lists it, and show <id> (as the relay's user) gives its error and event",
    `show: ${
      shown.code === 0
        ? (
            shown.stdout.split('\n').find((l) => l.includes('InvalidArgument')) ?? shown.stdout.slice(0, 200)
          ).trim()
        : `exited ${shown.code}: ${shown.stderr.trim().slice(0, 300)}`
    }; list: ${listed.code === 0 ? `${listedRows.length} dead letter(s), ids ${listedRows.map((r) => r.id).join(', ')}` : `exited ${listed.code}: ${listed.stderr.trim().slice(0, 200)}`}`,
  );
  await cleanUp();
  c.info(`runbook: held back: ${lap()}`);

  // 4. No route to EventBridge (runbook step 3): the bus endpoint takes the connection and never answers.
  const silent = await startSilentEndpoint();
  c.cleanups.push(() => silent.close());
  const first = await commit('runbook-noroute', 5, 5, (i) => ({ i }));
  const unrouted = await c.start(c.relay, {
    runtime: { AWS_ENDPOINT_URL_EVENTBRIDGE: silent.url },
  });
  const timedOut = await c.invoke(unrouted, c.relay, {}, RELAY_TIMEOUT_MS);
  await unrouted.stop();
  await silent.close();
  await commit('runbook-noroute', 5, 5, (i) => ({ i: i + 5 }));
  const [stuck, stuckText] = await Promise.all([statusJson(), statusText()]);
  const failed = unrouted.logLines.filter((l) => l.includes('"publish failed"'));
  const reason = failed.map((l) => (JSON.parse(l) as { reason?: string }).reason ?? '')[0] ?? '';
  const backPressure = unrouted.logLines
    .filter((l) => l.includes('"BackPressure"'))
    .reduce((n, l) => n + Number((JSON.parse(l) as { BackPressure?: number }).BackPressure ?? 0), 0);
  const summary = timedOut.result as { published?: number; failures?: { reason: string }[] } | undefined;
  c.check(
    timedOut.type === 'result' &&
      summary?.published === 0 &&
      /^PutEventsTimeoutError: no answer from the bus/.test(reason) &&
      summary.failures?.[0]?.reason === reason &&
      backPressure >= first.length,
    "runbook: with no route to EventBridge the relay's log says why (publish failed: PutEventsTimeoutError) and BackPressure grows",
    `${failed.length} "publish failed" line(s): ${reason.slice(0, 150)}; BackPressure ${backPressure}; ${c.describe(timedOut).slice(0, 200)}`,
  );
  const retried = stuckText.split('\n').findIndex((l) => l.startsWith('retrying:'));
  const errorLine = stuckText.split('\n')[retried + 1] ?? '';
  c.check(
    stuck.pending - baseline.pending === 10 &&
      stuck.retrying - baseline.retrying === first.length &&
      stuck.lastErrors[0]?.error === reason &&
      stuck.lastErrors[0]?.count === first.length &&
      errorLine.startsWith(`  ${first.length} × PutEventsTimeoutError: no answer from the bus`) &&
      stuck.deadLettered === baseline.deadLettered &&
      stuck.heldBack === baseline.heldBack &&
      stuck.published === baseline.published,
    "runbook: … and outbox status shows pending growing, the events retrying with the bus's timeout, none published, dead-lettered or held back",
    [
      ...['pending', 'in flight', 'in backoff', 'retrying'].map((label) => `"${line(stuckText, label)}"`),
      `"${errorLine.slice(0, 90)}…"`,
      JSON.stringify({ stuck, baseline }).slice(0, 1500),
      ...['dead-lettered', 'held back'].map((label) => `"${line(stuckText, label)}"`),
    ].join(', '),
  );
  await cleanUp();
  c.info(`runbook: no route: ${lap()}`);

  // 5. A backlog (runbook step 6): what the monitor would scale to, then what it does.
  const backlogPerRelay = Number(operator.env[EnvVar.backlogPerRelay]);
  const maxRelays = Number(operator.env[EnvVar.maxRelays]);
  const size = backlogPerRelay + 500;
  for (let done = 0; done < size; done += 5_000) {
    await commit('runbook-backlog', Math.min(5_000, size - done), 1_000, (i) => ({ i: done + i }));
  }
  const committedIn = lap();
  const wanted = Math.min(maxRelays, Math.ceil(size / backlogPerRelay));
  const [backlog, backlogText] = await Promise.all([statusJson(), statusText()]);
  c.check(
    backlog.pending - baseline.pending === size &&
      backlog.scaleOut.relays === wanted &&
      backlog.scaleOut.claimable >= size &&
      backlog.inBackoff === baseline.inBackoff &&
      backlog.heldBack === baseline.heldBack &&
      line(backlogText, 'monitor scales to').includes(`${wanted} relays of ${maxRelays}`),
    'runbook: a backlog: outbox status shows it pending and the relays the monitor would scale to',
    `${size} committed; "${line(backlogText, 'pending')}", "${line(backlogText, 'monitor scales to')}"; ${JSON.stringify({ backlog, baseline }).slice(0, 1500)}`,
  );
  const extras = new LambdaService({
    spec: {
      name: `${c.relay.path.split('/').slice(1, -1).join('/')}-runbook-extra`,
      assetDir: c.asDeployed(c.relay).assetDir,
      handler: c.relay.handler,
      memoryMb: c.relay.memoryMb,
      environment: c.asDeployed(c.relay).environment,
    },
    baseEnv: c.runtimeEnv,
    timeoutMs: c.relay.timeoutSeconds * 1000 * c.scale,
  });
  c.cleanups.push(() => extras.stop({ wait: false }));
  let invoked = 0;
  c.onRelayInvoked((payload) => {
    invoked++;
    extras.invoke(payload).catch(() => {});
  });
  const statusIn = lap();
  const monitorFn = await c.start(c.monitor);
  const monitored = await c.invoke(monitorFn, c.monitor, {}, c.monitor.timeoutSeconds * 1000 * c.scale);
  await monitorFn.stop();
  const { started: extraStarted = -1 } =
    (monitored.result as { scaleOut?: { started?: number } } | undefined)?.scaleOut ?? {};
  const monitorIn = lap();
  // The next look, once the extra relays are publishing (at most 20 s): pending has fallen.
  let after = await statusJson();
  for (const until = Date.now() + 20_000; after.pending >= backlog.pending && Date.now() < until; ) {
    await sleep(500);
    after = await statusJson();
  }
  c.onRelayInvoked(undefined);
  // Their work is shown: they are stopped as Lambda would at their timeout, the rest deleted.
  await extras.stop({ wait: false });
  c.check(
    monitored.type === 'result' &&
      extraStarted === wanted - 1 &&
      invoked === extraStarted &&
      after.pending < backlog.pending,
    'runbook: … the monitor starts the extra relays outbox status said, and pending falls from one outbox status to the next',
    `monitor started ${extraStarted} (status said ${wanted} relays), ${invoked} invoked; pending ${backlog.pending} then ${after.pending}`,
  );
  await cleanUp();
  c.info(
    `runbook: backlog: committed in ${committedIn}, status ${statusIn}, monitor ${monitorIn}, pending fell in ${lap()}`,
  );
  c.info(`runbook: ${((performance.now() - started) / 1000).toFixed(1)} s in all`);
}

/**
 * The "Run it" step's variables (docs/operations.md#connect-the-cli-to-the-deployed-database),
 * valued as an operator would from the stack's outputs; `problems` names what does not map.
 */
async function operatorEnvironment(c: RunbookContext): Promise<{
  env: Record<string, string>;
  relayUser: string;
  problems: string[];
}> {
  const docs = await readFile(join(root, 'docs', 'operations.md'), 'utf8');
  const problems: string[] = [];
  const output = (name: string) => {
    const found = [...c.stack.outputs.entries()].find(([id]) => new RegExp(`${name}[0-9A-F]{8}$`).test(id));
    if (!found) problems.push(`no ${name} output`);
    return found?.[1].value ?? '';
  };
  const statusEnvironment = Object.fromEntries(
    output('StatusEnvironment')
      .split(' ')
      .filter(Boolean)
      .map((pair) => pair.split('=', 2) as [string, string]),
  );
  const fromOutputs: Record<string, string> = {
    PGHOST: output('DatabaseHost'),
    PGPORT: output('DatabasePort'),
    PGDATABASE: output('DatabaseName'),
    PGUSER: output('MonitorDatabaseUser'),
    AWS_REGION: c.region,
    ...statusEnvironment,
  };
  const runIt = /\*\*6\. Run it\.\*\*\s*```sh\n([\s\S]*?)```/.exec(docs)?.[1];
  if (!runIt) problems.push('docs/operations.md has no "6. Run it." sh block');
  const script = (runIt ?? '').replace(/\\\n/g, ' ').replace(/#.*$/gm, '');
  const env: Record<string, string> = {};
  for (const m of script.matchAll(/\b([A-Z][A-Z0-9_]*)=(\S*)/g)) {
    const [, name = '', documented = ''] = m;
    if (name in fromOutputs) env[name] = fromOutputs[name] as string;
    else if (/^(true|false|none|transaction)$/.test(documented)) env[name] = documented;
    else problems.push(`${name} (documented as ${documented}) is in no output`);
  }
  if (!/^\s*npx outbox status\s*$/m.test(script)) problems.push('the block does not run `npx outbox status`');
  for (const name of [
    'PGHOST',
    'PGPORT',
    'PGDATABASE',
    'PGUSER',
    'AWS_REGION',
    ...Object.keys(statusEnvironment),
  ])
    if (!(name in env)) problems.push(`the block does not set ${name}`);
  return { env, relayUser: output('RelayDatabaseUser'), problems };
}

/** A bus endpoint that accepts connections and never answers: no route to EventBridge, as the relay sees it. */
async function startSilentEndpoint(): Promise<{ url: string; close(): Promise<void> }> {
  const sockets = new Set<Socket>();
  const server = createServer((s) => {
    sockets.add(s);
    s.on('error', () => {});
    s.on('close', () => sockets.delete(s));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  let closed = false;
  return {
    url: `http://127.0.0.1:${port}`,
    close: async () => {
      if (closed) return;
      closed = true;
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
