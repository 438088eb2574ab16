/**
 * `outbox bus [--port N] [--refuse <text>]`: a local EventBridge endpoint, for trying the relay, the
 * CLI or your own code without AWS. One port answers both buses the relay can publish to: the
 * classic event bus's PutEvents (AWS JSON 1.1) and the Custom Event Bus's (Smithy RPC v2 CBOR), with
 * their limits (shared/local/bus.ts). It prints the variables that point the relay at it, then each
 * accepted event; Ctrl-C stops it. `npm run bus` in a checkout runs the same command.
 *
 * `--refuse <text>` refuses every entry whose Detail holds the text with `InvalidArgument`, a
 * permanent error (the relay dead-letters the event at once), so that dead letters can be listed,
 * shown and replayed locally.
 *
 * The endpoint is loaded only when this command runs (a dynamic import), so the other commands do
 * not load it; the package ships it compiled beside the CLI.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Command } from 'commander';
import type { AcceptedEvent, LocalBus } from '../../local/bus.ts';
import type { LocalDelivery } from '../../local/delivery.ts';
import { portNumber, shorteningFactor } from '../../platform/cli/parsers.ts';
import type { OperationsContext } from '../../platform/cli/program.ts';
import { onInterrupt } from '../../platform/cli/signals.ts';
import { EnvVar, OutboxConfigError, OutboxError } from '../../platform/index.ts';

/** How long a stopped `outbox bus` waits for the forwarded copy of its Ctrl-C before it exits, ms. */
const FORWARDED_SIGNAL_GRACE_MS = 250;

/** The port `outbox bus` listens on without `--port` or LOCAL_BUS_PORT. */
export const LOCAL_BUS_DEFAULT_PORT = 4010;

/** The Custom Event Bus ARN `outbox bus` prints for the relay; its local subscribers deliver it. */
const LOCAL_CUSTOM_BUS_ARN = 'arn:aws:events:us-east-1:000000000000:event-busv2/demo/local';

interface BusOptions {
  port?: number;
  refuse?: string;
  deliver?: string | true;
  stack: string[];
  retryDelayScale?: number;
}

/** Adds `bus` to the program. */
export function registerBus(program: Command, ctx: OperationsContext): void {
  program
    .command('bus')
    .description(
      'a local EventBridge endpoint (the classic bus and the Custom Event Bus) on this machine, until Ctrl-C',
    )
    .option(
      '--port <n>',
      `port to listen on, 0 for a free one (default: LOCAL_BUS_PORT, else ${LOCAL_BUS_DEFAULT_PORT})`,
      portNumber,
    )
    .option(
      '--refuse <text>',
      'refuse every event whose detail holds <text> with InvalidArgument, a permanent error: the relay dead-letters it at once',
    )
    .option(
      '--deliver [cdk.out]',
      "deliver the bus's events to the consumers of a synthesised CDK app (cdk synth's output folder, default cdk.out): their rules or Custom Event Bus subscribers, retries and failure queues, each function's bundle run as Lambda runs it, logged in with DATABASE_URL (or PG*)",
    )
    .option(
      '--stack <name>',
      'with --deliver: only the consumers of this stack (repeatable; default every stack)',
      (value: string, previous: string[]) => [...previous, value],
      [] as string[],
    )
    .option(
      '--retry-delay-scale <factor>',
      "with --deliver: multiplies Lambda's asynchronous retry waits (60 s, then 120 s) and the queues' visibility timeouts, to try failures in seconds (0.05: 3 s and 6 s; default 1, as AWS)",
      shorteningFactor,
    )
    .action(async (o: BusOptions) => {
      if (o.deliver === undefined && (o.stack.length > 0 || o.retryDelayScale !== undefined)) {
        throw new OutboxConfigError('--deliver', '--stack and --retry-delay-scale apply only with --deliver');
      }
      let port = o.port ?? LOCAL_BUS_DEFAULT_PORT;
      const fromEnv = ctx.env[EnvVar.localBusPort];
      if (o.port === undefined && fromEnv !== undefined) {
        try {
          port = portNumber(fromEnv);
        } catch (error) {
          throw new OutboxConfigError(
            EnvVar.localBusPort,
            `${(error as Error).message} (got ${JSON.stringify(fromEnv)})`,
          );
        }
      }
      // --deliver's inputs are checked before the bus starts: a mistake prints no exports.
      const delivering =
        o.deliver === undefined
          ? undefined
          : await prepareDelivery(ctx, o.deliver === true ? 'cdk.out' : o.deliver, o);
      const { startLocalBus } = await import('../../local/bus.ts');
      const bus = await startLocalBus({
        port,
        faults: o.refuse === undefined ? {} : { poisonMarker: o.refuse, poisonCode: 'InvalidArgument' },
      }).catch((error: NodeJS.ErrnoException) => {
        if (error.code === 'EADDRINUSE') {
          throw new OutboxError(
            `port ${port} is in use (another outbox bus?): pick another with --port, or --port 0 for any free one`,
          );
        }
        throw error;
      });
      // Ctrl-C (and the copy of it that npm or npx forwards) closes the server; the command exits 0.
      // The handler goes in before anything is printed: whoever waits for the first line may press
      // Ctrl-C at once, and a SIGINT that finds no handler kills the process.
      // Closing takes a millisecond, so the process would be tearing down when the copy of the same
      // Ctrl-C that npm or npx forwards arrives, and a signal then kills it (exit by SIGINT instead
      // of 0): it lingers a moment, its handler in place, to absorb that copy.
      const stopped = new Promise<void>((resolve) => {
        const remove = onInterrupt(
          () =>
            void bus
              .close()
              .then(() => sleep(FORWARDED_SIGNAL_GRACE_MS))
              .then(() => {
                remove();
                resolve();
              }),
          () => process.exit(130),
        );
      });
      const credentials = 'AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local';
      ctx.out(`local EventBridge endpoint listening on ${bus.url}`);
      // Everything `outbox relay` needs besides DATABASE_URL: the bus name is required (the local
      // bus takes any name and prints it with each event).
      ctx.out(`  export ${EnvVar.eventBusName}=demo AWS_ENDPOINT_URL_EVENTBRIDGE=${bus.url} ${credentials}`);
      // The same port answers the Custom Event Bus's PutEvents (any event-busv2 ARN).
      ctx.out(
        `  or, for a Custom Event Bus: export ${EnvVar.eventBusArn}=${LOCAL_CUSTOM_BUS_ARN} AWS_ENDPOINT_URL_EVENTBRIDGEV2=${bus.url} ${credentials} (and no ${EnvVar.eventBusName})`,
      );
      if (o.refuse !== undefined) {
        ctx.out(
          `  refusing every event whose detail holds ${JSON.stringify(o.refuse)} (InvalidArgument: dead-lettered at once)`,
        );
      }
      bus.emitter.on('accepted', (e: AcceptedEvent) => {
        ctx.out(
          `${new Date(e.receivedAt).toISOString()}  ${e.eventBusName ?? '-'}  ${e.source}  ${e.detailType}  ${JSON.stringify(e.detail)}`,
        );
      });
      const delivery = await delivering?.start(bus).catch(async (error: unknown) => {
        await bus.close();
        throw error;
      });
      await stopped;
      await delivery?.close();
    });
}

/**
 * `--deliver`: reads the synthesised app and checks the consumers' login (DATABASE_URL, or PG*)
 * before the bus starts; `start` attaches the consumers (shared/local/delivery.ts) and prints what
 * each gets and the variables that point `outbox inbox` at the local Lambda and SQS endpoints.
 * @throws {OutboxConfigError} (`DATABASE_URL`) when neither DATABASE_URL nor PGHOST says where the
 *   consumers log in; (`--deliver`) when the folder holds no cloud assembly, or not the `--stack` named
 */
async function prepareDelivery(
  ctx: OperationsContext,
  dir: string,
  o: BusOptions,
): Promise<{ start(bus: LocalBus): Promise<LocalDelivery> }> {
  const login = Object.fromEntries(
    [EnvVar.databaseUrl, EnvVar.pgHost, EnvVar.pgPort, EnvVar.pgUser, EnvVar.pgDatabase, EnvVar.pgPassword]
      .filter((name) => ctx.env[name] !== undefined && ctx.env[name] !== '')
      .map((name) => [name, ctx.env[name] as string]),
  );
  if (!login[EnvVar.databaseUrl] && !login[EnvVar.pgHost]) {
    throw new OutboxConfigError(
      EnvVar.databaseUrl,
      "is required with --deliver: the consumers' functions log in to the database it names (their inbox and their tables)",
    );
  }
  const { readCloudAssembly, startLocalDelivery } = await import('../../local/delivery.ts');
  const stacks = await readCloudAssembly(dir, o.stack).catch((error: Error) => {
    throw new OutboxConfigError('--deliver', error.message);
  });
  return {
    async start(bus) {
      const delivery = await startLocalDelivery({
        bus,
        stacks,
        customEventBusArn: LOCAL_CUSTOM_BUS_ARN,
        environment: login,
        retryDelayScale: o.retryDelayScale,
        log: (line) => ctx.out(`${new Date().toISOString()}  ${line}`),
      });
      if (delivery.consumers.length === 0) {
        ctx.err(
          `warning: ${dir} has no consumer to deliver to (no rule or subscriber whose target is a function it bundles)`,
        );
      }
      for (const c of delivery.consumers) {
        ctx.out(
          `delivering to ${c.name} (${c.topology}; --function-name ${c.functionNames.join(' or ')}): ${c.retries}`,
        );
        for (const [role, url] of Object.entries(c.queues)) ctx.out(`  ${role} queue: ${url}`);
      }
      ctx.out(
        `  for outbox inbox failed|parked|queue replay: export AWS_ENDPOINT_URL_LAMBDA=${delivery.lambdaUrl} AWS_ENDPOINT_URL_SQS=${delivery.sqsUrl} AWS_REGION=us-east-1 AWS_ACCESS_KEY_ID=local AWS_SECRET_ACCESS_KEY=local`,
      );
      return delivery;
    },
  };
}
