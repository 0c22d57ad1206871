import { countingListener, startAzurite, startS3, type LocalAzure, type LocalS3 } from '../../../test/helpers/object-stores';
import { freePort } from '../../../test/helpers/redis';
import { validateByos, type ByosTarget, type ValidationResult } from './storage-check';

// Real provider APIs on loopback: s3rver speaks S3 (signatures checked), Azurite speaks Azure Blob.
let s3: LocalS3;
let azure: LocalAzure;
beforeAll(async () => {
  [s3, azure] = await Promise.all([startS3(), startAzurite()]);
}, 30_000);
afterAll(async () => {
  await Promise.all([s3?.stop(), azure?.stop()]);
});

const open = { policy: { allowPrivate: true }, timeoutMs: 3000 };
const guarded = { policy: { allowPrivate: false }, timeoutMs: 3000 };

const s3Target = (over: Partial<ByosTarget> = {}): ByosTarget => ({
  provider: 's3',
  endpoint: s3.endpoint,
  bucket: s3.bucket,
  region: 'us-east-1',
  accessKey: s3.accessKey,
  secretKey: s3.secretKey,
  ...over,
});
const azureTarget = (over: Partial<ByosTarget> = {}): ByosTarget => ({
  provider: 'azure',
  endpoint: azure.endpoint,
  bucket: azure.container,
  region: null,
  accessKey: azure.account,
  secretKey: azure.accountKey,
  ...over,
});

/** The name of the first failing check; every check before it passed and none ran after it. */
function failedAt(r: ValidationResult): string | null {
  const i = r.checks.findIndex((c) => !c.ok);
  if (i < 0) return null;
  expect(r.checks.slice(0, i).every((c) => c.ok)).toBe(true);
  expect(r.checks).toHaveLength(i + 1);
  return r.checks[i].name;
}

describe.each([
  ['s3 (s3rver)', () => s3Target()],
  ['r2 (s3rver)', () => s3Target({ provider: 'r2', region: 'auto' })],
  ['gcs (s3rver)', () => s3Target({ provider: 'gcs', region: 'auto' })],
  ['azure (Azurite)', () => azureTarget()],
])('%s', (_name, target) => {
  it('a good bucket is valid: every check passes, with its latency', async () => {
    const r = await validateByos(target(), open);
    expect(r.valid).toBe(true);
    expect(r.checks.map((c) => c.name)).toEqual(['connection', 'credentials', 'bucket', 'write', 'read', 'delete']);
    for (const c of r.checks) {
      expect(c.ok).toBe(true);
      expect(Number.isInteger(c.latencyMs) && c.latencyMs >= 0).toBe(true);
    }
  });

  // s3rver checks a SigV4 request's key id but not its signature; Azurite checks the whole SharedKey signature, so
  // for azure the account is right and only the key is wrong.
  it('wrong keys fail the credentials check', async () => {
    const t = target();
    const wrong = t.provider === 'azure' ? Buffer.from('not the account key at all, 32b!').toString('base64') : 'WRONGSECRET';
    const r = await validateByos({ ...t, accessKey: t.provider === 'azure' ? t.accessKey : 'WRONGKEY', secretKey: wrong }, open);
    expect(r.valid).toBe(false);
    expect(failedAt(r)).toBe('credentials');
    expect(JSON.stringify(r)).not.toContain(wrong);
  });

  it('a missing bucket fails the bucket check', async () => {
    const r = await validateByos({ ...target(), bucket: 'no-such-bucket' }, open);
    expect(failedAt(r)).toBe('bucket');
    expect(r.checks.at(-1)!.message).toContain('does not exist');
  });

  it('a closed port fails the connection check', async () => {
    const port = await freePort();
    const t = target();
    const endpoint = t.endpoint!.replace(/:\d+/, `:${port}`);
    const r = await validateByos({ ...t, endpoint }, open);
    expect(failedAt(r)).toBe('connection');
    expect(r.checks[0].message).toBe('connection refused');
  });
});

it('a provider that accepts connections but never answers fails the credentials check within the limit', async () => {
  const silent = await countingListener({ answer: false });
  try {
    for (const t of [
      s3Target({ endpoint: `http://127.0.0.1:${silent.port}` }),
      azureTarget({ endpoint: `http://127.0.0.1:${silent.port}/acct` }),
    ]) {
      const r = await validateByos(t, { policy: { allowPrivate: true }, timeoutMs: 300 });
      expect(failedAt(r)).toBe('credentials');
      expect(r.checks[1].message).toBe('no answer within 300 ms');
    }
  } finally {
    await silent.stop();
  }
});

describe('the egress guard (EGRESS_ALLOW_PRIVATE=false)', () => {
  it.each(['http://169.254.169.254', 'http://169.254.169.254/latest/meta-data', 'http://[fd00:ec2::254]'])(
    'refuses the metadata endpoint %s, whatever the setting',
    async (endpoint) => {
      for (const options of [guarded, open]) {
        const r = await validateByos(s3Target({ endpoint }), options);
        expect(failedAt(r)).toBe('connection');
        expect(r.checks[0].message).toMatch(/^refused by the egress guard: .*metadata/);
      }
    },
  );

  it('refuses a private or loopback address without connecting to it', async () => {
    const listener = await countingListener();
    try {
      for (const endpoint of [`http://127.0.0.1:${listener.port}`, `http://localhost:${listener.port}`, 'http://10.0.0.1:9000']) {
        const r = await validateByos(s3Target({ endpoint }), guarded);
        expect(failedAt(r)).toBe('connection');
        expect(r.checks[0].message).toMatch(/^refused by the egress guard/);
      }
      const viaAzure = await validateByos(azureTarget({ endpoint: `http://127.0.0.1:${listener.port}/devstoreaccount1` }), guarded);
      expect(failedAt(viaAzure)).toBe('connection');
      expect(listener.connections()).toBe(0);
      // The same listener is reached when private egress is allowed: the refusal above was the guard's.
      const allowed = await validateByos(s3Target({ endpoint: `http://127.0.0.1:${listener.port}` }), open);
      expect(allowed.checks[0].ok).toBe(true);
      expect(listener.connections()).toBeGreaterThan(0);
    } finally {
      await listener.stop();
    }
  });

  it('refuses endpoints that are not http(s) or that carry credentials', async () => {
    for (const endpoint of ['ftp://example.com', 'http://user:pass@example.com', 'not a url']) {
      const r = await validateByos(s3Target({ endpoint }), guarded);
      expect(failedAt(r)).toBe('connection');
    }
  });
});
