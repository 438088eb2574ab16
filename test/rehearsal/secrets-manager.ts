/**
 * A minimal Secrets Manager endpoint: `GetSecretValue` over the AWS JSON 1.1 protocol, for the
 * migrate function, reached through the SDK's standard AWS_ENDPOINT_URL_SECRETS_MANAGER.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

/** A running endpoint. */
export interface SecretsEndpoint {
  url: string;
  /** SecretIds asked for, in order. */
  requests: string[];
  close(): Promise<void>;
}

/** Serves `secrets` (ARN → SecretString) until closed. */
export async function startSecretsEndpoint(secrets: ReadonlyMap<string, string>): Promise<SecretsEndpoint> {
  const requests: string[] = [];
  const server = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => {
      body += c.toString();
    });
    req.on('end', () => {
      const reply = (status: number, payload: unknown) => {
        res.writeHead(status, { 'content-type': 'application/x-amz-json-1.1' });
        res.end(JSON.stringify(payload));
      };
      if (req.headers['x-amz-target'] !== 'secretsmanager.GetSecretValue') {
        return reply(400, {
          __type: 'UnknownOperationException',
          message: String(req.headers['x-amz-target']),
        });
      }
      const { SecretId } = JSON.parse(body || '{}') as { SecretId?: string };
      requests.push(String(SecretId));
      const secret = SecretId === undefined ? undefined : secrets.get(SecretId);
      if (secret === undefined) {
        return reply(400, {
          __type: 'ResourceNotFoundException',
          message: `Secrets Manager can't find ${SecretId}`,
        });
      }
      reply(200, {
        ARN: SecretId,
        Name: SecretId,
        SecretString: secret,
        VersionId: '00000000-0000-0000-0000-000000000001',
        VersionStages: ['AWSCURRENT'],
        CreatedDate: Date.now() / 1000,
      });
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    requests,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}
