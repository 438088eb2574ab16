/**
 * Whether a Lambda function is an inbox consumer's, before `outbox inbox parked replay
 * --function-name F --consumer C` marks C's events and invokes F with them: F's environment must
 * name C in `OUTBOX_INBOX_CONSUMER` (EnvVar.inboxConsumer). Another consumer's function would apply
 * C's events as its own (a new event to it), and C's records would stay `replaying`.
 */
import { GetFunctionConfigurationCommand, type LambdaClient } from '@aws-sdk/client-lambda';
import { ConsumerFunctionError } from '../../platform/errors.ts';
import { EnvVar } from '../../platform/names.ts';

/** What an operator may do when the check refuses a function that is the consumer's after all. */
const OVERRIDE = `set ${EnvVar.inboxConsumer} on the consumer's function, or pass --skip-function-check if you are sure`;

/**
 * Reads the function's configuration (GetFunctionConfiguration, which needs
 * `lambda:GetFunctionConfiguration`; a name, a partial ARN `name:alias` or an ARN, as Invoke takes)
 * and checks that its environment names `consumer`.
 * @throws ConsumerFunctionError when it names another consumer or none, when its environment could
 *   not be decrypted, or when the configuration could not be read (with the API's error as cause)
 */
export async function checkConsumerFunction(
  client: LambdaClient,
  functionName: string,
  consumer: string,
  options: { abortSignal?: AbortSignal } = {},
): Promise<void> {
  let environment: { Variables?: Record<string, string>; Error?: { ErrorCode?: string; Message?: string } };
  try {
    const configuration = await client.send(
      new GetFunctionConfigurationCommand({ FunctionName: functionName }),
      {
        abortSignal: options.abortSignal,
      },
    );
    environment = configuration.Environment ?? {};
  } catch (error) {
    const e = error as Error;
    throw new ConsumerFunctionError(
      functionName,
      consumer,
      `could not read its configuration (${e.name}: ${e.message}), to check that it is consumer ${consumer}'s ` +
        `function: the check needs lambda:GetFunctionConfiguration on it; or pass --skip-function-check if you are sure`,
      { cause: error },
    );
  }
  if (environment.Error) {
    throw new ConsumerFunctionError(
      functionName,
      consumer,
      `its environment could not be read (${environment.Error.ErrorCode}: ${environment.Error.Message}), to check that it is consumer ${consumer}'s function; ${OVERRIDE}`,
    );
  }
  const found = environment.Variables?.[EnvVar.inboxConsumer];
  if (found === undefined) {
    throw new ConsumerFunctionError(
      functionName,
      consumer,
      `its environment does not set ${EnvVar.inboxConsumer}, so nothing says it is consumer ${consumer}'s function; ${OVERRIDE}`,
    );
  }
  if (found !== consumer) {
    throw new ConsumerFunctionError(
      functionName,
      consumer,
      `its environment names inbox consumer "${found}" (${EnvVar.inboxConsumer}), not "${consumer}": ` +
        `it would apply ${consumer}'s events as its own. Give --function-name the function of consumer ${consumer}`,
      { found },
    );
  }
}
