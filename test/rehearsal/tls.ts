/**
 * A certificate authority made for one rehearsal, with openssl: the CA certificate is handed to the
 * functions the way Lambda hands them Amazon's RDS CA bundle (NODE_EXTRA_CA_CERTS), and one server
 * certificate serves both Postgres and the proxy stand-in.
 */
import { execFileSync } from 'node:child_process';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** PEM files of the run's CA and its server certificate. */
export interface RehearsalCertificates {
  /** The CA certificate: what NODE_EXTRA_CA_CERTS points at. */
  ca: string;
  cert: string;
  key: string;
}

/**
 * Makes a CA and a server certificate valid for `hosts` (DNS names and IP addresses), in `dir`.
 * @throws when openssl is missing or fails (its error output included)
 */
export async function makeCertificates(dir: string, hosts: string[]): Promise<RehearsalCertificates> {
  const file = (name: string) => join(dir, name);
  const openssl = (...args: string[]) =>
    execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  openssl(
    'req',
    '-x509',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-days',
    '2',
    '-subj',
    '/CN=outbox rehearsal CA',
    '-keyout',
    file('ca.key'),
    '-out',
    file('ca.crt'),
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  );
  openssl(
    'req',
    '-newkey',
    'rsa:2048',
    '-nodes',
    '-subj',
    '/CN=localhost',
    '-keyout',
    file('server.key'),
    '-out',
    file('server.csr'),
  );
  const san = hosts.map((h) => (/^[\d.]+$/.test(h) || h.includes(':') ? `IP:${h}` : `DNS:${h}`)).join(',');
  await writeFile(
    file('server.ext'),
    `subjectAltName=${san}\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n`,
  );
  openssl(
    'x509',
    '-req',
    '-in',
    file('server.csr'),
    '-CA',
    file('ca.crt'),
    '-CAkey',
    file('ca.key'),
    '-CAcreateserial',
    '-days',
    '2',
    '-extfile',
    file('server.ext'),
    '-out',
    file('server.crt'),
  );
  return { ca: file('ca.crt'), cert: file('server.crt'), key: file('server.key') };
}
