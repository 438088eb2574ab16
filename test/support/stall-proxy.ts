/**
 * A TCP relay in front of a server (Postgres, the local bus) that can stop answering: while held,
 * it still accepts connections, but every byte in either direction waits, as traffic does during
 * an RDS failover or while RDS Proxy waits to borrow a database connection. Released, it delivers
 * what it held, in order, and carries on (so a statement sent during the stall still runs late).
 * A side that closes while held is closed on the other side only after its held bytes went out.
 */
import { createServer, type Server, type Socket, connect as tcpConnect } from 'node:net';

/** A running stall proxy. */
export interface StallProxy {
  /** Port on 127.0.0.1 to connect to instead of the target. */
  port: number;
  /** `url` with its host and port replaced by the proxy's. */
  urlFor(url: string): string;
  /** Holds all traffic from now on; released after `ms` when given (else by `release()`). */
  hold(ms?: number): void;
  /** Delivers the held traffic and stops holding. */
  release(): void;
  readonly held: boolean;
  /** Connections accepted so far. */
  readonly accepted: number;
  /** Everything clients sent, as latin1 text: statement texts can be searched in it. */
  readonly sent: string;
  /** Destroys every connection and stops listening. */
  close(): Promise<void>;
}

/** Starts a stall proxy on a free port of 127.0.0.1, forwarding to `target`. */
export async function startStallProxy(target: { host: string; port: number }): Promise<StallProxy> {
  let held = false;
  let accepted = 0;
  const sent: Buffer[] = [];
  let timer: NodeJS.Timeout | undefined;
  /** Held actions, in arrival order across all connections. */
  const queue: (() => void)[] = [];
  const sockets = new Set<Socket>();
  const later = (action: () => void) => (held ? queue.push(action) : action());

  const server: Server = createServer((client) => {
    accepted++;
    const upstream = tcpConnect(target.port, target.host);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {}); // the other side is closed below
    }
    client.on('data', (chunk) => {
      sent.push(chunk);
      later(() => upstream.write(chunk));
    });
    upstream.on('data', (chunk) => later(() => client.write(chunk)));
    client.on('close', () => later(() => upstream.end()));
    upstream.on('close', () => later(() => client.end()));
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', resolve);
  });
  const port = (server.address() as { port: number }).port;

  const proxy: StallProxy = {
    port,
    urlFor(url) {
      const u = new URL(url);
      u.hostname = '127.0.0.1';
      u.port = String(port);
      return u.toString();
    },
    hold(ms) {
      held = true;
      clearTimeout(timer);
      if (ms !== undefined) timer = setTimeout(() => proxy.release(), ms);
    },
    release() {
      clearTimeout(timer);
      held = false;
      for (const action of queue.splice(0)) action();
    },
    get held() {
      return held;
    },
    get accepted() {
      return accepted;
    },
    get sent() {
      return Buffer.concat(sent).toString('latin1');
    },
    close: () =>
      new Promise<void>((resolve) => {
        clearTimeout(timer);
        queue.length = 0;
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
  return proxy;
}
