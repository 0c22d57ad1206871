/**
 * Storage validation against the real provider API (spec 4.5): the S3 API for s3, r2 and gcs (GCS through its
 * interoperability endpoint with HMAC keys), Azure Blob for azure. Checks run in order and stop at the first that
 * fails: connection (the egress guard, then a TCP connect), credentials, bucket, write, read and delete of a probe
 * object. Each reports its own measured latency. A connection that does not work is `valid: false` with the failing
 * check named, never an error.
 *
 * Each provider's SDK is required when a check for that provider runs (the AWS SDK ~130 ms, Azure's ~235 ms): the
 * regions service starts without them, and most deployments only ever use one.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import net from 'node:net';
import type { StoragePipelineOptions } from '@azure/storage-blob';
import { checkUrlShape, EgressError, guardedLookup, type EgressPolicy } from '@svc/kit';
import { guardedAgents, type GuardedAgents } from './guarded-agents';

export const BYOS_PROVIDERS = ['s3', 'r2', 'gcs', 'azure'] as const;
export type ByosProvider = (typeof BYOS_PROVIDERS)[number];

/** A complete BYOS configuration with its keys in the clear (only ever in memory). */
export interface ByosTarget {
  provider: ByosProvider;
  endpoint: string | null;
  bucket: string;
  region: string | null;
  accessKey: string;
  secretKey: string;
}

export interface Check {
  name: 'connection' | 'credentials' | 'bucket' | 'write' | 'read' | 'delete';
  ok: boolean;
  message: string;
  latencyMs: number;
}

export interface ValidationResult {
  valid: boolean;
  provider: ByosProvider;
  checks: Check[];
}

/** The endpoint a provider is reached at: the configured one, or the provider's public default. */
export function endpointOf(t: Pick<ByosTarget, 'provider' | 'endpoint' | 'region'>): string | null {
  if (t.endpoint) return t.endpoint;
  if (t.provider === 's3') return `https://s3.${t.region || 'us-east-1'}.amazonaws.com`;
  if (t.provider === 'gcs') return 'https://storage.googleapis.com';
  return null; // r2 and azure name the account in the endpoint: required
}

class CheckFailed extends Error {}

/** A short, safe description of a provider or transport failure (never a key, never a stack). */
export function describe(err: unknown, timeoutMs: number): string {
  if (err instanceof EgressError) return `refused by the egress guard: ${err.message}`;
  if (err instanceof CheckFailed) return err.message;
  const e = err as { name?: string; code?: string; message?: string; statusCode?: number; $metadata?: { httpStatusCode?: number } };
  for (let c: unknown = err; c; c = (c as { cause?: unknown }).cause) if (c instanceof EgressError) return describe(c, timeoutMs);
  if (e.name === 'TimeoutError' || e.name === 'AbortError' || e.code === 'ETIMEDOUT') return `no answer within ${timeoutMs} ms`;
  if (e.code === 'ECONNREFUSED') return 'connection refused';
  if (e.code === 'ECONNRESET') return 'connection reset';
  if (e.code === 'ENOTFOUND' || e.code === 'EAI_AGAIN') return 'the host does not resolve';
  const status = e.$metadata?.httpStatusCode ?? e.statusCode;
  const code = e.code ?? e.name ?? 'Error';
  const text = (e.message ?? '').replace(/\s+/g, ' ').slice(0, 200);
  return [status ? `HTTP ${status}` : null, code !== text ? code : null, text && text !== 'UnknownError' ? text : null]
    .filter(Boolean)
    .join(': ');
}

function codeOf(err: unknown): string {
  const e = err as { code?: string; name?: string; Code?: string };
  return e.code ?? e.Code ?? e.name ?? '';
}

function statusOf(err: unknown): number | undefined {
  const e = err as { statusCode?: number; $metadata?: { httpStatusCode?: number } };
  return e.$metadata?.httpStatusCode ?? e.statusCode;
}

/** Errors meaning the signature was checked and the key is unknown or wrong. */
const BAD_CREDENTIALS = new Set([
  'InvalidAccessKeyId',
  'SignatureDoesNotMatch',
  'AuthenticationFailed',
  'InvalidAuthenticationInfo',
  'InvalidToken',
]);

interface Steps {
  credentials(): Promise<string>;
  bucket(): Promise<string>;
  write(): Promise<string>;
  read(): Promise<string>;
  delete(): Promise<string>;
}

export interface ValidateOptions {
  policy: EgressPolicy;
  timeoutMs: number;
}

export async function validateByos(target: ByosTarget, options: ValidateOptions): Promise<ValidationResult> {
  const checks: Check[] = [];
  const run = async (name: Check['name'], step: () => Promise<string>): Promise<boolean> => {
    const started = performance.now();
    try {
      const message = await step();
      checks.push({ name, ok: true, message, latencyMs: Math.round(performance.now() - started) });
      return true;
    } catch (err) {
      checks.push({ name, ok: false, message: describe(err, options.timeoutMs), latencyMs: Math.round(performance.now() - started) });
      return false;
    }
  };
  const done = () => ({ valid: checks.every((c) => c.ok), provider: target.provider, checks });

  const endpoint = endpointOf(target);
  let url: URL | null = null;
  const connected = await run('connection', async () => {
    if (!endpoint) throw new CheckFailed(`an endpoint is required for ${target.provider}`);
    url = checkUrlShape(endpoint, options.policy);
    return await connect(url, options);
  });
  if (!connected || !url) return done();
  const agents = guardedAgents(options.policy);
  try {
    const steps = target.provider === 'azure' ? azureSteps(target, url, agents, options) : s3Steps(target, url, agents, options);
    for (const name of ['credentials', 'bucket', 'write', 'read', 'delete'] as const) if (!(await run(name, steps[name]))) break;
  } finally {
    agents.destroy();
  }
  return done();
}

/** A TCP connection to the endpoint's host and port, its address checked by the guard first. */
function connect(url: URL, options: ValidateOptions): Promise<string> {
  const port = Number(url.port) || (url.protocol === 'https:' ? 443 : 80);
  const host = url.hostname.replace(/^\[|\]$/g, '');
  return new Promise((ok, fail) => {
    const socket = net.connect({ host, port, lookup: guardedLookup(options.policy) as never, timeout: options.timeoutMs });
    socket.once('connect', () => {
      socket.destroy();
      ok(`reached ${host}:${port}`);
    });
    socket.once('timeout', () => {
      socket.destroy();
      fail(Object.assign(new Error('timeout'), { code: 'ETIMEDOUT' }));
    });
    socket.once('error', (err) => {
      socket.destroy();
      fail(err);
    });
  });
}

function probeKey(): string {
  return `.svc-validate/${randomUUID()}.txt`;
}

function s3Steps(t: ByosTarget, url: URL, agents: GuardedAgents, options: ValidateOptions): Steps {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
  const s3 = require('@aws-sdk/client-s3') as typeof import('@aws-sdk/client-s3');
  const { DeleteObjectCommand, GetObjectCommand, HeadBucketCommand, ListBucketsCommand, PutObjectCommand, S3Client } = s3;
  const client = new S3Client({
    endpoint: url.toString().replace(/\/$/, ''),
    region: t.region || (t.provider === 's3' ? 'us-east-1' : 'auto'),
    credentials: { accessKeyId: t.accessKey, secretAccessKey: t.secretKey },
    forcePathStyle: true,
    maxAttempts: 1,
    // Plain PUTs: no chunked checksum framing that S3-compatible stores (and GCS) may not speak.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    requestHandler: {
      httpAgent: agents.http,
      httpsAgent: agents.https,
      connectionTimeout: options.timeoutMs,
      requestTimeout: options.timeoutMs,
    },
  });
  const signal = () => ({ abortSignal: AbortSignal.timeout(options.timeoutMs) });
  const key = probeKey();
  const body = randomBytes(16).toString('hex');
  return {
    async credentials() {
      try {
        await client.send(new ListBucketsCommand({}), signal());
        return 'the keys are accepted';
      } catch (err) {
        // Signed correctly but not allowed to list buckets: the keys are good (bucket-scoped keys are common).
        if (!BAD_CREDENTIALS.has(codeOf(err)) && statusOf(err) === 403) return 'the keys are accepted (listing buckets is not allowed)';
        throw err;
      }
    },
    async bucket() {
      try {
        await client.send(new HeadBucketCommand({ Bucket: t.bucket }), signal());
      } catch (err) {
        if (statusOf(err) === 404) throw new CheckFailed(`bucket ${t.bucket} does not exist`);
        if (statusOf(err) === 403) throw new CheckFailed(`access to bucket ${t.bucket} is denied`);
        throw err;
      }
      return `bucket ${t.bucket} is reachable`;
    },
    async write() {
      await client.send(new PutObjectCommand({ Bucket: t.bucket, Key: key, Body: body, ContentType: 'text/plain' }), signal());
      return `wrote ${key}`;
    },
    async read() {
      const res = await client.send(new GetObjectCommand({ Bucket: t.bucket, Key: key }), signal());
      const text = await res.Body!.transformToString();
      if (text !== body) throw new CheckFailed(`read back ${text.length} bytes that differ from what was written`);
      return `read ${key} back intact`;
    },
    async delete() {
      await client.send(new DeleteObjectCommand({ Bucket: t.bucket, Key: key }), signal());
      client.destroy();
      return `deleted ${key}`;
    },
  };
}

function azureSteps(t: ByosTarget, url: URL, agents: GuardedAgents, options: ValidateOptions): Steps {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
  const { BlobServiceClient, StorageSharedKeyCredential } = require('@azure/storage-blob') as typeof import('@azure/storage-blob');
  // The account name is the access key, the account key the secret key; the bucket is a container.
  const pipeline: StoragePipelineOptions & { agent: GuardedAgents['http'] } = {
    agent: agents.for(url),
    retryOptions: { maxTries: 1, tryTimeoutInMs: options.timeoutMs },
  };
  const service = new BlobServiceClient(
    url.toString().replace(/\/$/, ''),
    new StorageSharedKeyCredential(t.accessKey, t.secretKey),
    pipeline,
  );
  const container = service.getContainerClient(t.bucket);
  const key = probeKey();
  const blob = container.getBlockBlobClient(key);
  const body = randomBytes(16).toString('hex');
  const signal = () => ({ abortSignal: AbortSignal.timeout(options.timeoutMs) });
  const azureError = (err: unknown): never => {
    const status = statusOf(err);
    const code = codeOf(err);
    if (BAD_CREDENTIALS.has(code) || status === 403) throw new CheckFailed(`HTTP ${status}: ${code || 'the keys are not accepted'}`);
    throw err;
  };
  return {
    async credentials() {
      await service.getProperties(signal()).catch(azureError);
      return 'the keys are accepted';
    },
    async bucket() {
      try {
        await container.getProperties(signal());
      } catch (err) {
        if (statusOf(err) === 404) throw new CheckFailed(`container ${t.bucket} does not exist`);
        azureError(err);
      }
      return `container ${t.bucket} is reachable`;
    },
    async write() {
      await blob.upload(body, Buffer.byteLength(body), signal());
      return `wrote ${key}`;
    },
    async read() {
      const text = (await blob.downloadToBuffer(0, undefined, signal())).toString('utf8');
      if (text !== body) throw new CheckFailed(`read back ${text.length} bytes that differ from what was written`);
      return `read ${key} back intact`;
    },
    async delete() {
      await blob.delete(signal());
      return `deleted ${key}`;
    },
  };
}
