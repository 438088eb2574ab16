/**
 * A stand-in for RDS Proxy's front door: TLS required, an IAM authentication token required as
 * the password, then the session is handed to PgBouncer (transaction pooling), which stands in for
 * the proxy's multiplexing. It speaks just enough of the Postgres protocol for that: SSLRequest,
 * StartupMessage, a cleartext password request, and CancelRequest.
 *
 * It also stands in for an RDS instance's own IAM login (the `rds_iam` check that RDS runs inside
 * the server): with `upstream.tls`, the session goes on over TLS to Postgres itself, which then
 * serves it as a session of its own (no pooler).
 *
 * The token is checked for what our code controls: it is an `rds-db` connect token for this host,
 * port, user and region, signed recently with a 15-minute expiry. Its signature is not verified
 * (the signer uses dummy credentials here); only a real account proves that part.
 */
import { once } from 'node:events';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { TLSSocket, connect as tlsConnect } from 'node:tls';

const SSL_REQUEST = 80877103;
const CANCEL_REQUEST = 80877102;

/** Options of {@link startIamProxy}. */
export interface IamProxyOptions {
  /** Address to listen on (the proxy endpoint the functions are given). */
  host: string;
  port: number;
  /** TLS certificate and key (PEM text). */
  cert: string;
  key: string;
  /**
   * Where sessions are handed on: PgBouncer, or Postgres itself. With `tls`, over TLS verified
   * against that CA (PEM text) and server name.
   */
  upstream: { host: string; port: number; tls?: { ca: string; servername: string } };
  /** Region the tokens must be signed for. */
  region: string;
}

/** A token seen by the proxy: who logged in, and whether the token was accepted. */
export interface LoginRecord {
  user: string;
  accepted: boolean;
  reason?: string;
  /** The client's startup parameters (user, database, application_name, statement_timeout…). */
  parameters: Record<string, string>;
}

/** A running proxy stand-in. */
export interface IamProxy {
  logins: LoginRecord[];
  close(): Promise<void>;
}

/** Starts the proxy stand-in. */
export async function startIamProxy(o: IamProxyOptions): Promise<IamProxy> {
  const logins: LoginRecord[] = [];
  const sockets = new Set<Socket>();
  const server: Server = createServer((client) => {
    sockets.add(client);
    client.on('close', () => sockets.delete(client));
    client.on('error', () => client.destroy());
    void handle(client).catch(() => client.destroy());
  });

  async function handle(raw: Socket): Promise<void> {
    const reader = new MessageReader(raw);
    const first = await reader.untyped();
    const code = first.readInt32BE(0);
    if (code === CANCEL_REQUEST) return forwardCancel(first, raw);
    if (code !== SSL_REQUEST) {
      raw.end(errorResponse('28000', 'the proxy requires TLS (requireTLS)'));
      return;
    }
    raw.write('S');
    reader.detach();
    const tls = new TLSSocket(raw, { isServer: true, cert: o.cert, key: o.key });
    tls.on('error', () => raw.destroy());
    const secure = new MessageReader(tls);
    const startup = await secure.untyped();
    if (startup.readInt32BE(0) === CANCEL_REQUEST) return forwardCancel(startup, tls);
    const params = parseStartup(startup);
    const user = params.user ?? '';
    tls.write(Buffer.from([0x52, 0, 0, 0, 8, 0, 0, 0, 3])); // AuthenticationCleartextPassword
    const password = await secure.typed();
    const token = password.body.subarray(0, password.body.length - 1).toString('utf8');
    const problem = checkToken(token, { host: o.host, port: o.port, user, region: o.region });
    logins.push({
      user,
      accepted: problem === undefined,
      ...(problem ? { reason: problem } : {}),
      parameters: params,
    });
    if (problem) {
      tls.end(errorResponse('28P01', `IAM authentication failed for user "${user}": ${problem}`));
      return;
    }
    const upstream = await openUpstream();
    sockets.add(upstream);
    upstream.on('close', () => {
      sockets.delete(upstream);
      tls.end();
    });
    upstream.on('error', () => tls.destroy());
    tls.on('close', () => upstream.destroy());
    upstream.write(frameUntyped(startup));
    const rest = secure.detach();
    if (rest.length > 0) upstream.write(rest);
    tls.pipe(upstream);
    upstream.pipe(tls);
  }

  /** A connection to the upstream, TLS already negotiated when `upstream.tls` asks for it. */
  async function openUpstream(): Promise<Socket> {
    const plain = connect(o.upstream.port, o.upstream.host);
    await once(plain, 'connect');
    const tlsOptions = o.upstream.tls;
    if (!tlsOptions) return plain;
    plain.write(frameUntyped(Buffer.from([0x04, 0xd2, 0x16, 0x2f]))); // SSLRequest 80877103
    const [answer] = (await once(plain, 'data')) as [Buffer];
    if (answer.toString('latin1', 0, 1) !== 'S') throw new Error('the upstream refused TLS');
    const secure = tlsConnect({ socket: plain, ca: tlsOptions.ca, servername: tlsOptions.servername });
    await once(secure, 'secureConnect');
    return secure;
  }

  function forwardCancel(message: Buffer, from: Socket): void {
    const upstream = connect(o.upstream.port, o.upstream.host, () => upstream.end(frameUntyped(message)));
    upstream.on('error', () => {});
    from.end();
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, resolve);
  });
  return {
    logins,
    close: () =>
      new Promise<void>((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}

/**
 * Why `token` is not a connect token for this endpoint and user, or undefined when it is.
 * Shape (the RDS Signer's presigned URL without scheme):
 * `host:port/?Action=connect&DBUser=…&X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=…/region/rds-db/aws4_request&X-Amz-Date=…&X-Amz-Expires=900&X-Amz-SignedHeaders=host&X-Amz-Signature=…`
 */
export function checkToken(
  token: string,
  expected: { host: string; port: number; user: string; region: string },
): string | undefined {
  let url: URL;
  try {
    url = new URL(`https://${token}`);
  } catch {
    return 'not an IAM token (expected host:port/?Action=connect&…)';
  }
  const q = url.searchParams;
  if (url.hostname !== expected.host || Number(url.port) !== expected.port)
    return `signed for ${url.host}, not ${expected.host}:${expected.port}`;
  if (q.get('Action') !== 'connect') return 'Action is not connect';
  if (q.get('DBUser') !== expected.user) return `signed for DBUser ${q.get('DBUser')}`;
  const credential = q.get('X-Amz-Credential') ?? '';
  if (!credential.endsWith(`/${expected.region}/rds-db/aws4_request`))
    return `credential scope ${credential.split('/').slice(1).join('/')} is not ${expected.region}/rds-db`;
  if (q.get('X-Amz-Algorithm') !== 'AWS4-HMAC-SHA256' || !q.get('X-Amz-Signature')) return 'not signed';
  const expires = Number(q.get('X-Amz-Expires'));
  if (!(expires > 0 && expires <= 900)) return `X-Amz-Expires ${q.get('X-Amz-Expires')} is not within 900 s`;
  const date = q.get('X-Amz-Date') ?? '';
  const signedAt = Date.parse(
    `${date.slice(0, 4)}-${date.slice(4, 6)}-${date.slice(6, 8)}T${date.slice(9, 11)}:${date.slice(11, 13)}:${date.slice(13, 15)}Z`,
  );
  if (!(Date.now() - signedAt < expires * 1000 && signedAt - Date.now() < 60_000))
    return 'the token has expired';
  return undefined;
}

function parseStartup(message: Buffer): Record<string, string> {
  const parts = message.subarray(4).toString('utf8').split('\0');
  const params: Record<string, string> = {};
  for (let i = 0; i + 1 < parts.length; i += 2)
    if (parts[i]) params[parts[i] as string] = parts[i + 1] as string;
  return params;
}

/** An untyped message (SSLRequest, StartupMessage, CancelRequest) with its length prefix restored. */
function frameUntyped(body: Buffer): Buffer {
  const length = Buffer.alloc(4);
  length.writeInt32BE(body.length + 4);
  return Buffer.concat([length, body]);
}

function errorResponse(code: string, message: string): Buffer {
  const fields = Buffer.from(`SFATAL\0VFATAL\0C${code}\0M${message}\0\0`, 'utf8');
  const head = Buffer.alloc(5);
  head.write('E');
  head.writeInt32BE(fields.length + 4, 1);
  return Buffer.concat([head, fields]);
}

/** Reads whole protocol messages from a socket until detached. */
class MessageReader {
  private buffer = Buffer.alloc(0);
  private wake: (() => void) | undefined;
  private ended = false;
  private readonly onData = (chunk: Buffer) => {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    this.wake?.();
  };
  private readonly onEnd = () => {
    this.ended = true;
    this.wake?.();
  };
  private readonly socket: Socket;
  constructor(socket: Socket) {
    this.socket = socket;
    socket.on('data', this.onData);
    socket.on('end', this.onEnd);
  }
  private async need(bytes: number): Promise<void> {
    while (this.buffer.length < bytes) {
      if (this.ended) throw new Error('connection closed');
      await new Promise<void>((resolve) => {
        this.wake = resolve;
      });
    }
  }
  /** A message without a type byte: int32 length, then the body (returned without the length). */
  async untyped(): Promise<Buffer> {
    await this.need(4);
    const length = this.buffer.readInt32BE(0);
    await this.need(length);
    const body = this.buffer.subarray(4, length);
    this.buffer = this.buffer.subarray(length);
    return body;
  }
  /** A typed message: type byte, int32 length, body. */
  async typed(): Promise<{ type: string; body: Buffer }> {
    await this.need(5);
    const length = this.buffer.readInt32BE(1);
    await this.need(1 + length);
    const message = {
      type: String.fromCharCode(this.buffer[0] as number),
      body: this.buffer.subarray(5, 1 + length),
    };
    this.buffer = this.buffer.subarray(1 + length);
    return message;
  }
  /** Stops reading; returns what was read but not consumed. */
  detach(): Buffer {
    this.socket.off('data', this.onData);
    this.socket.off('end', this.onEnd);
    return this.buffer;
  }
}
