/**
 * A local AWS Lambda endpoint for tests: it speaks the Invoke API's wire protocol (REST-JSON,
 * `POST /2015-03-31/functions/{FunctionName}/invocations`, AWS Lambda API reference, "Invoke") so
 * that the real `@aws-sdk/client-lambda` client reaches it over HTTP (`AWS_ENDPOINT_URL_LAMBDA`),
 * and runs the handler registered under the function's name in this process, as Lambda would.
 *
 * - `RequestResponse` (the default): 200 with the handler's result as JSON; a handler that throws
 *   answers 200 with `X-Amz-Function-Error: Unhandled` and `{ errorType, errorMessage }`.
 * - `Event`: 202 at once; the handler runs afterwards (awaited by {@link LocalLambda.idle}).
 * - An unknown function: 404 `ResourceNotFoundException`.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import type { Context } from 'aws-lambda';
import { lambdaContext } from './lambda.ts';

/** A handler as Lambda calls it. */
export type LocalHandler = (event: unknown, context: Context) => Promise<unknown>;

/** One invocation the endpoint received. */
export interface LocalInvocation {
  functionName: string;
  invocationType: string;
  payload: unknown;
  outcome: 'result' | 'error';
}

/** A running local Lambda endpoint. */
export interface LocalLambda {
  url: string;
  invocations: LocalInvocation[];
  /** Resolves once every `Event` invocation received so far has run. */
  idle(): Promise<void>;
  close(): Promise<void>;
}

/** Starts the endpoint on a free port; `timeoutMs` is each invocation's Lambda timeout. */
export async function startLocalLambda(
  functions: Record<string, LocalHandler>,
  timeoutMs = 30_000,
): Promise<LocalLambda> {
  const invocations: LocalInvocation[] = [];
  const pending = new Set<Promise<unknown>>();
  const run = async (
    name: string,
    type: string,
    payload: unknown,
  ): Promise<{ result: unknown; error?: undefined } | { error: Error }> => {
    const handler = functions[name] as LocalHandler;
    try {
      const result = await handler(payload, lambdaContext(timeoutMs, name));
      invocations.push({ functionName: name, invocationType: type, payload, outcome: 'result' });
      return { result };
    } catch (error) {
      invocations.push({ functionName: name, invocationType: type, payload, outcome: 'error' });
      return { error: error as Error };
    }
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const match = /^\/2015-03-31\/functions\/([^/]+)\/invocations/.exec(req.url ?? '');
      const name = match ? decodeURIComponent(match[1] as string).replace(/^arn:.*:function:/, '') : '';
      if (req.method !== 'POST' || !match) {
        res.writeHead(404, {
          'content-type': 'application/json',
          'x-amzn-errortype': 'UnknownOperationException',
        });
        res.end('{"message":"not an Invoke request"}');
        return;
      }
      if (!functions[name]) {
        res.writeHead(404, {
          'content-type': 'application/json',
          'x-amzn-errortype': 'ResourceNotFoundException',
        });
        res.end(JSON.stringify({ Type: 'User', message: `Function not found: ${name}` }));
        return;
      }
      const type = String(req.headers['x-amz-invocation-type'] ?? 'RequestResponse');
      const body = Buffer.concat(chunks).toString('utf8');
      const payload = body === '' ? {} : JSON.parse(body);
      if (type === 'Event') {
        const p = run(name, type, payload);
        pending.add(p);
        void p.finally(() => pending.delete(p));
        res.writeHead(202);
        res.end();
        return;
      }
      void run(name, type, payload).then((outcome) => {
        if (outcome.error) {
          res.writeHead(200, {
            'content-type': 'application/json',
            'x-amz-function-error': 'Unhandled',
            'x-amz-executed-version': '$LATEST',
          });
          res.end(JSON.stringify({ errorType: outcome.error.name, errorMessage: outcome.error.message }));
        } else {
          res.writeHead(200, { 'content-type': 'application/json', 'x-amz-executed-version': '$LATEST' });
          res.end(JSON.stringify((outcome as { result: unknown }).result ?? null));
        }
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    invocations,
    async idle() {
      while (pending.size > 0) await Promise.allSettled([...pending]);
    },
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
