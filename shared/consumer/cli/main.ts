/**
 * `outbox-inbox`, the consumer package's command: the consumer's commands (index.ts) on their own,
 * `outbox-inbox parked list --consumer billing` being `outbox inbox parked list --consumer billing`
 * of the relay package. It reads the database from DATABASE_URL or the PG* variables, as `outbox`
 * does, and Lambda and SQS through the AWS SDK's own variables (AWS_REGION, credentials,
 * AWS_ENDPOINT_URL_LAMBDA, AWS_ENDPOINT_URL_SQS). Output and exit statuses are `outbox`'s
 * (shared/platform/cli/program.ts).
 */
import { EXIT } from '../../platform/cli/errors.ts';
import {
  type CliIo,
  CONVENTIONS_HELP,
  commandContext,
  createProgram,
  DATABASE_HELP,
  defaultIo,
  runProgram,
} from '../../platform/cli/program.ts';
import { registerInboxCommands } from './index.ts';

/**
 * Runs `outbox-inbox`.
 * @param argv `process.argv` shape (node, script, …args)
 * @returns the exit code: 0 ok, 1 failure, 2 usage or configuration error
 */
export async function main(argv: string[], cliIo: CliIo = defaultIo()): Promise<number> {
  let code: number = EXIT.ok;
  const ctx = commandContext(cliIo, (c) => {
    code = c;
  });
  const program = createProgram(
    'outbox-inbox',
    "An inbox consumer's operations: parked and failed events, failure queues, pruning, metrics (the same commands as `outbox inbox`)",
    ctx,
  ).addHelpText(
    'after',
    `
Environment:
${DATABASE_HELP}: the consumer's database, as the consumer's role
  AWS_REGION, AWS credentials   for --function-name (Lambda) and the queue commands (SQS);
                                AWS_ENDPOINT_URL_LAMBDA, AWS_ENDPOINT_URL_SQS for local endpoints

${CONVENTIONS_HELP}`,
  );
  registerInboxCommands(program, ctx);
  return runProgram(program, argv, ctx, () => code);
}
