/**
 * Real local object stores for storage validation: s3rver (the S3 API, with signature checks) in this process, and
 * Microsoft's Azurite blob emulator as a child process. Each on a free loopback port with a temp directory.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { BlobServiceClient, StorageSharedKeyCredential } from '@azure/storage-blob';
import { freePort } from './redis';

// eslint-disable-next-line @typescript-eslint/no-require-imports -- s3rver ships no types
const S3rver = require('s3rver') as new (options: object) => { run(): Promise<{ port: number }>; close(): Promise<void> };

export interface LocalS3 {
  endpoint: string;
  bucket: string;
  accessKey: string;
  secretKey: string;
  stop(): Promise<void>;
}

/** s3rver's fixed credentials are S3RVER / S3RVER; it checks every signature against them. */
export async function startS3(bucket = 'good-bucket'): Promise<LocalS3> {
  const directory = mkdtempSync(join(tmpdir(), 's3rver-'));
  const server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory, configureBuckets: [{ name: bucket }] });
  const { port } = await server.run();
  return {
    endpoint: `http://127.0.0.1:${port}`,
    bucket,
    accessKey: 'S3RVER',
    secretKey: 'S3RVER',
    async stop() {
      await server.close();
      rmSync(directory, { recursive: true, force: true });
    },
  };
}

export interface LocalAzure {
  endpoint: string;
  container: string;
  account: string;
  accountKey: string;
  stop(): Promise<void>;
}

/** Azurite's well-known development account. */
const DEV_ACCOUNT = 'devstoreaccount1';
const DEV_KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==';

export async function startAzurite(container = 'good-container'): Promise<LocalAzure> {
  const location = mkdtempSync(join(tmpdir(), 'azurite-'));
  const port = await freePort();
  const bin = resolve(__dirname, '../../node_modules/azurite/dist/src/blob/main.js');
  const proc = spawn(
    process.execPath,
    [bin, '--blobHost', '127.0.0.1', '--blobPort', String(port), '--location', location, '--skipApiVersionCheck', '--loose', '--silent'],
    { stdio: 'ignore' },
  );
  const exited = new Promise<void>((ok) => proc.once('exit', () => ok()));
  await waitForPort(port, 20_000);
  const endpoint = `http://127.0.0.1:${port}/${DEV_ACCOUNT}`;
  await new BlobServiceClient(endpoint, new StorageSharedKeyCredential(DEV_ACCOUNT, DEV_KEY)).getContainerClient(container).create();
  return {
    endpoint,
    container,
    account: DEV_ACCOUNT,
    accountKey: DEV_KEY,
    async stop() {
      proc.kill('SIGTERM');
      await exited;
      rmSync(location, { recursive: true, force: true });
    },
  };
}

async function waitForPort(port: number, ms: number): Promise<void> {
  const until = Date.now() + ms;
  for (;;) {
    const up = await new Promise<boolean>((ok) => {
      const s = connect(port, '127.0.0.1', () => (s.destroy(), ok(true))).once('error', () => ok(false));
    });
    if (up) return;
    if (Date.now() > until) throw new Error(`nothing listens on ${port} after ${ms} ms`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * A TCP listener that counts connections (proves that a refused endpoint was never contacted) and closes each at
 * once, or with `answer: false` keeps it open and silent (a provider that hangs).
 */
export async function countingListener(
  options: { answer?: boolean } = {},
): Promise<{ port: number; connections: () => number; stop(): Promise<void> }> {
  let n = 0;
  const open = new Set<Socket>();
  const server: Server = createServer((socket) => {
    n++;
    if (options.answer === false) {
      open.add(socket);
      socket.on('error', () => undefined);
    } else socket.destroy();
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  return {
    port: (server.address() as { port: number }).port,
    connections: () => n,
    stop: () =>
      new Promise((ok) => {
        for (const socket of open) socket.destroy();
        server.close(() => ok());
      }),
  };
}
