/** Loopback ports for the servers that tests, the rehearsal and `npm run db` start. */
import { createServer } from 'node:net';

/**
 * A TCP port free on 127.0.0.1: `preferred` when it is free, else one the kernel picks.
 * (Free when asked: another process may take it before the caller listens.)
 */
export async function freePort(preferred = 0): Promise<number> {
  const tryPort = (port: number) =>
    new Promise<number | undefined>((resolve) => {
      const server = createServer();
      server.once('error', () => resolve(undefined));
      server.listen(port, '127.0.0.1', () => {
        const { port: got } = server.address() as { port: number };
        server.close(() => resolve(got));
      });
    });
  const port = (preferred > 0 ? await tryPort(preferred) : undefined) ?? (await tryPort(0));
  if (port === undefined) throw new Error('no free TCP port on 127.0.0.1');
  return port;
}
