/**
 * A local endpoint for Lambda's Invoke API (`POST /2015-03-31/functions/{FunctionName}/invocations`,
 * REST-JSON), so the real `@aws-sdk/client-lambda` client talks to it over HTTP
 * (`AWS_ENDPOINT_URL_LAMBDA`, or the client's `endpoint`). An asynchronous invocation
 * (`X-Amz-Invocation-Type: Event`) is answered 202 at once, as Lambda does once it has queued the
 * event, and handed to `onInvoke`; a synchronous one waits for `onInvoke` and answers 200 with its
 * result. Every invocation is recorded; `throttle` answers 429 TooManyRequestsException instead.
 *
 * It also answers GetFunctionConfiguration (`GET /2015-03-31/functions/{FunctionName}/configuration`)
 * for the functions named in `functions`, with the fields of Lambda's FunctionConfiguration that a
 * client reads (name, ARN, runtime, `Environment.Variables`), and 404 ResourceNotFoundException for
 * any other, as Lambda does. A name, a partial ARN (`name:alias`) or an ARN names the function.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

/** An invocation the endpoint received. */
export interface ReceivedInvocation {
  functionName: string;
  invocationType: 'Event' | 'RequestResponse' | 'DryRun';
  payload: unknown;
  /** `Date.now()` when it arrived. */
  receivedAt: number;
}

/** What GetFunctionConfiguration answers for a function. */
export interface LocalFunctionConfiguration {
  /** `Environment.Variables`; omitted from the answer when undefined, as for a function with none. */
  environment?: Record<string, string>;
}

/** Options of {@link startLocalLambda}. */
export interface LocalLambdaOptions {
  /** Runs the function; awaited only for a synchronous invocation. */
  onInvoke?: (invocation: ReceivedInvocation) => unknown;
  /** The functions GetFunctionConfiguration knows, by name; any other is not found. */
  functions?: Record<string, LocalFunctionConfiguration>;
}

/** A running local Lambda endpoint. */
export interface LocalLambda {
  url: string;
  readonly invocations: ReceivedInvocation[];
  /** Refuse every invocation with 429 TooManyRequestsException (Lambda's throttle). */
  throttle: boolean;
  close(): Promise<void>;
}

const INVOKE_PATH = /^\/2015-03-31\/functions\/([^/]+)\/invocations(?:\?.*)?$/;
const CONFIGURATION_PATH = /^\/2015-03-31\/functions\/([^/]+)\/configuration(?:\?.*)?$/;
const REGION = 'us-east-1';
const ACCOUNT = '123456789012';

/** The function's name in a name, a partial ARN (`name:qualifier`) or an ARN. */
function functionNameOf(identifier: string): string {
  const parts = identifier.split(':');
  return (identifier.startsWith('arn:') ? parts[6] : parts[0]) ?? identifier;
}

/** Starts the endpoint on 127.0.0.1 and a free port. */
export async function startLocalLambda(options: LocalLambdaOptions = {}): Promise<LocalLambda> {
  const invocations: ReceivedInvocation[] = [];
  const state = { throttle: false };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const match = INVOKE_PATH.exec(req.url ?? '');
      const error = (status: number, type: string, message: string) => {
        res.writeHead(status, { 'content-type': 'application/json', 'x-amzn-errortype': type });
        res.end(JSON.stringify({ Type: 'User', message }));
      };
      const configuration = CONFIGURATION_PATH.exec(req.url ?? '');
      if (req.method === 'GET' && configuration) {
        const name = functionNameOf(decodeURIComponent(configuration[1] as string));
        const arn = `arn:aws:lambda:${REGION}:${ACCOUNT}:function:${name}`;
        const known = options.functions?.[name];
        if (!known) return error(404, 'ResourceNotFoundException', `Function not found: ${arn}`);
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            FunctionName: name,
            FunctionArn: arn,
            Runtime: 'nodejs24.x',
            Handler: 'index.handler',
            Timeout: 30,
            MemorySize: 256,
            Version: '$LATEST',
            State: 'Active',
            PackageType: 'Zip',
            Architectures: ['arm64'],
            ...(known.environment ? { Environment: { Variables: known.environment } } : {}),
          }),
        );
        return;
      }
      if (req.method !== 'POST' || !match)
        return error(404, 'ResourceNotFoundException', `no route ${req.url}`);
      if (state.throttle) return error(429, 'TooManyRequestsException', 'Rate Exceeded.');
      const body = Buffer.concat(chunks).toString('utf8');
      let payload: unknown;
      try {
        payload = body.length > 0 ? JSON.parse(body) : undefined;
      } catch {
        return error(400, 'InvalidRequestContentException', 'Could not parse request body into json');
      }
      const invocation: ReceivedInvocation = {
        functionName: decodeURIComponent(match[1] as string),
        invocationType:
          (req.headers['x-amz-invocation-type'] as ReceivedInvocation['invocationType']) ?? 'RequestResponse',
        payload,
        receivedAt: Date.now(),
      };
      invocations.push(invocation);
      if (invocation.invocationType === 'Event') {
        res.writeHead(202, { 'content-length': '0' });
        res.end();
        void Promise.resolve()
          .then(() => options.onInvoke?.(invocation))
          .catch(() => {});
        return;
      }
      void Promise.resolve()
        .then(() => options.onInvoke?.(invocation))
        .then(
          (result) => {
            res.writeHead(200, { 'content-type': 'application/json', 'x-amz-executed-version': '$LATEST' });
            res.end(JSON.stringify(result ?? null));
          },
          (e: unknown) => {
            res.writeHead(200, { 'content-type': 'application/json', 'x-amz-function-error': 'Unhandled' });
            res.end(JSON.stringify({ errorMessage: String((e as Error)?.message ?? e) }));
          },
        );
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    invocations,
    get throttle() {
      return state.throttle;
    },
    set throttle(value: boolean) {
      state.throttle = value;
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
