/**
 * A throwaway certificate authority and a server certificate it signed, for the TLS listeners of the test brokers
 * (Kafka's SASL_SSL, Redis's --tls-port). Made with openssl (installed by the test set-up when missing): EC P-256
 * keys, valid for two days, the server's for 127.0.0.1 and localhost. Clients trust `caFile`, as they would a
 * private CA (KAFKA_SSL_CA_FILE, REDIS_TLS_CA_FILE); `otherCaFile` is a CA that signed nothing here.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export interface TestCertificates {
  caFile: string;
  /** A CA that did not sign the server's certificate: a client trusting only it must refuse the server. */
  otherCaFile: string;
  certFile: string;
  /** PKCS#8, unencrypted. */
  keyFile: string;
  /** The key then the certificate in one file (Kafka's PEM keystore). */
  keystoreFile: string;
}

const openssl = (args: string[]) => execFileSync('openssl', args, { stdio: ['ignore', 'ignore', 'pipe'] });
const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

function makeCa(dir: string, name: string): { cert: string; key: string } {
  const cert = join(dir, `${name}.pem`);
  const key = join(dir, `${name}.key`);
  const constraints = ['-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'];
  openssl(['req', '-x509', ...EC, '-keyout', key, '-out', cert, '-days', '2', '-subj', `/CN=${name}`, ...constraints]);
  return { cert, key };
}

export function makeTestCertificates(dir: string): TestCertificates {
  const ca = makeCa(dir, 'svc-test-ca');
  const other = makeCa(dir, 'svc-other-ca');
  const keyFile = join(dir, 'server.key');
  const csr = join(dir, 'server.csr');
  const certFile = join(dir, 'server.pem');
  const ext = join(dir, 'server.ext');
  writeFileSync(ext, 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n');
  openssl(['req', ...EC, '-keyout', keyFile, '-out', csr, '-subj', '/CN=localhost']);
  openssl([
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    ca.cert,
    '-CAkey',
    ca.key,
    '-CAcreateserial',
    '-out',
    certFile,
    '-days',
    '2',
    '-extfile',
    ext,
  ]);
  const keystoreFile = join(dir, 'server-keystore.pem');
  writeFileSync(keystoreFile, readFileSync(keyFile, 'utf8') + readFileSync(certFile, 'utf8'));
  return { caFile: ca.cert, otherCaFile: other.cert, certFile, keyFile, keystoreFile };
}
