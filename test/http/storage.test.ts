import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { client, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startAzurite, startS3, type LocalAzure, type LocalS3 } from '../helpers/object-stores';
import { startStack, type Stack } from '../helpers/stack';

// Storage configuration through the gateway, validated against real local providers: s3rver (S3 API) and Azurite.
let stack: Stack;
let api: Client;
let owner: Account;
let t: { token: string };
let s3: LocalS3;
let azure: LocalAzure;
const path = () => `/api/v1/regions/storage/${owner.tenantId}`;

beforeAll(async () => {
  [stack, s3, azure] = await Promise.all([startStack({ env: { EGRESS_ALLOW_PRIVATE: 'true' } }), startS3(), startAzurite()]);
  api = client(stack.url);
  owner = await signUp(api, 'Storage');
  t = { token: owner.accessToken };
}, 30_000);
afterAll(async () => {
  await Promise.all([stack?.stop(), s3?.stop(), azure?.stop()]);
});

const s3Config = (over: Record<string, string> = {}) => ({
  storageMode: 'byos',
  byosProvider: 's3',
  byosEndpoint: s3.endpoint,
  byosBucket: s3.bucket,
  byosRegion: 'us-east-1',
  byosAccessKey: s3.accessKey,
  byosSecretKey: s3.secretKey,
  ...over,
});
const azureConfig = () => ({
  storageMode: 'byos',
  byosProvider: 'azure',
  byosEndpoint: azure.endpoint,
  byosBucket: azure.container,
  byosAccessKey: azure.account,
  byosSecretKey: azure.accountKey,
});
const failedCheck = (data: { checks: Array<{ name: string; ok: boolean }> }) => data.checks.find((c) => !c.ok)?.name;

it('defaults to platform storage in the primary region', async () => {
  const res = await api.get(path(), t);
  expect(res.body.data).toEqual({
    storageMode: 'platform',
    platformRegion: 'us-east',
    byosProvider: null,
    byosEndpoint: null,
    byosBucket: null,
    byosRegion: null,
    byosCredentialsSet: false,
    byosAccessKeyLast4: null,
    updatedAt: null,
  });
});

it('saves a byos configuration, never returns its keys, keeps them encrypted at rest, and validates it', async () => {
  const put = await api.put(path(), azureConfig(), t);
  expect(put.status).toBe(200);
  expect(put.body.data).toMatchObject({
    storageMode: 'byos',
    byosProvider: 'azure',
    byosBucket: azure.container,
    byosCredentialsSet: true,
    byosAccessKeyLast4: azure.account.slice(-4),
    platformRegion: null,
  });
  const got = await api.get(path(), t);
  expect(got.body.data).toEqual(put.body.data);
  for (const text of [put.text, got.text]) expect(text).not.toContain(azure.accountKey);
  // At rest: sealed with the master key (kit SecretBox, key id in the ciphertext), not in the clear.
  const db = ['regions.db', 'regions.db-wal']
    .map((f) => join(stack.dataDir, f))
    .filter((f) => existsSync(f))
    .map((f) => readFileSync(f).toString('latin1'))
    .join('');
  expect(db).not.toContain(azure.accountKey);
  expect(db).toMatch(/v1\.k1\./);

  const saved = await api.post(`${path()}/validate`, undefined, t);
  expect(saved.status).toBe(200);
  expect(saved.body.data.valid).toBe(true);
  expect(saved.body.data.provider).toBe('azure');
  expect(saved.body.data.checks.map((c: { name: string }) => c.name)).toEqual([
    'connection',
    'credentials',
    'bucket',
    'write',
    'read',
    'delete',
  ]);
  expect(saved.text).not.toContain(azure.accountKey);
});

it('validates a configuration in the body without saving it: good, wrong keys, missing bucket, closed port', async () => {
  const validate = (body: object) => api.post(`${path()}/validate`, body, t);
  const good = await validate(s3Config());
  expect(good.body.data).toMatchObject({ valid: true, provider: 's3' });
  for (const c of good.body.data.checks)
    expect(c).toEqual({ name: expect.any(String), ok: true, message: expect.any(String), latencyMs: expect.any(Number) });

  // s3rver checks the key id of a SigV4 request, not its signature: a wrong secret is shown with Azurite below.
  const wrong = await validate(s3Config({ byosAccessKey: 'AKIAWRONGKEY', byosSecretKey: 'definitely-wrong-secret' }));
  expect(wrong.status).toBe(200);
  expect(wrong.body.data.valid).toBe(false);
  expect(failedCheck(wrong.body.data)).toBe('credentials');
  expect(wrong.text).not.toContain('definitely-wrong-secret');

  const wrongAzure = await validate({
    ...azureConfig(),
    byosSecretKey: Buffer.from('a wrong account key of 32 bytes!').toString('base64'),
  });
  expect(failedCheck(wrongAzure.body.data)).toBe('credentials');

  const missing = await validate(s3Config({ byosBucket: 'no-such-bucket' }));
  expect(failedCheck(missing.body.data)).toBe('bucket');

  const closed = await validate(s3Config({ byosEndpoint: 'http://127.0.0.1:9' }));
  expect(closed.status).toBe(200);
  expect(failedCheck(closed.body.data)).toBe('connection');

  // None of that touched the saved configuration.
  expect((await api.get(path(), t)).body.data.byosProvider).toBe('azure');
});

it('refuses incomplete or contradictory configurations with 400 and changes nothing', async () => {
  const before = (await api.get(path(), t)).body.data;
  const fieldsOf = async (body: object) =>
    expectError(await api.put(path(), body, t), 400, 'VALIDATION_ERROR')
      .details.fields.map((f: { field: string }) => f.field)
      .sort();
  expect(await fieldsOf({ storageMode: 'byos', byosProvider: 's3', byosBucket: 'b-1' })).toEqual(['byosAccessKey', 'byosSecretKey']);
  expect(await fieldsOf({ storageMode: 'byos' })).toEqual(['byosAccessKey', 'byosBucket', 'byosProvider', 'byosSecretKey']);
  expect(await fieldsOf(s3Config({ byosProvider: 'r2', byosEndpoint: undefined as never }))).toEqual(['byosEndpoint']);
  expect(await fieldsOf(s3Config({ byosEndpoint: 'ftp://example.com' }))).toEqual(['byosEndpoint']);
  expect(await fieldsOf(s3Config({ byosEndpoint: 'http://169.254.169.254' }))).toEqual(['byosEndpoint']);
  expect(await fieldsOf(s3Config({ byosBucket: 'Bad_Bucket' }))).toEqual(['byosBucket']);
  expect(await fieldsOf({ storageMode: 'platform', byosBucket: 'b-1' })).toEqual(['byosBucket']);
  expect(await fieldsOf({ storageMode: 'platform', platformRegion: 'mars-1' })).toEqual(['platformRegion']);
  expect(await fieldsOf({ ...s3Config(), platformRegion: 'us-east' })).toEqual(['platformRegion']);
  expectError(await api.put(path(), { ...s3Config(), byosProvider: 'dropbox' }, t), 400, 'VALIDATION_ERROR');
  expect((await api.get(path(), t)).body.data).toEqual(before);
});

it('keeps platform storage where residency allows, and validates only byos', async () => {
  const prefs = `/api/v1/regions/preferences/${owner.tenantId}`;
  expect(
    (await api.patch(prefs, { dataResidencyRequired: true, dataResidencyRegion: 'eu-west', primaryRegion: 'eu-central' }, t)).status,
  ).toBe(200);
  const err = expectError(await api.put(path(), { storageMode: 'platform', platformRegion: 'us-west' }, t), 400, 'VALIDATION_ERROR');
  expect(err.details.reason).toBe('residency_conflict');
  const ok = await api.put(path(), { storageMode: 'platform' }, t);
  expect(ok.body.data).toMatchObject({ storageMode: 'platform', platformRegion: 'eu-central', byosCredentialsSet: false });
  expect((await api.put(path(), { storageMode: 'platform', platformRegion: 'eu-west' }, t)).body.data.platformRegion).toBe('eu-west');
  // An explicit platform region holds the residency rule for later preference changes too.
  expect(
    expectError(await api.patch(prefs, { dataResidencyRegion: 'us-east', primaryRegion: 'us-east' }, t), 400, 'VALIDATION_ERROR').details
      .reason,
  ).toBe('residency_conflict');
  const nothing = expectError(await api.post(`${path()}/validate`, undefined, t), 400, 'VALIDATION_ERROR');
  expect(nothing.details.reason).toBe('nothing_to_validate');
  expectError(await api.post(`${path()}/validate`, { storageMode: 'platform' }, t), 400, 'VALIDATION_ERROR');
});
