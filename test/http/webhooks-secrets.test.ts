import Database from 'better-sqlite3';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Webhook } from 'standardwebhooks';
import { VERIFY_WEBHOOK_TS } from '../../gateway/src/docs/webhook-verification';
import { client, createKey, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { startReceiver, verifyByHand, verifyWithStandardWebhooks, type Received, type Receiver } from '../helpers/receiver';
import { startStack, type Stack } from '../helpers/stack';

// Standard Webhooks secrets (CONTRACT.md 14): generated `whsec_` secrets verified by the `standardwebhooks` package
// with no options, and rotation with a grace period in which both secrets sign.
let stack: Stack;
let api: Client;
let receiver: Receiver;
let owner: Account;

beforeAll(async () => {
  stack = await startStack({ env: { WEBHOOK_RETRY_SCHEDULE: '0.2,0.2', WEBHOOK_TIMEOUT_MS: '2000' } });
  api = client(stack.url);
  receiver = await startReceiver();
  owner = await signUp(api, 'Secrets');
});
afterAll(async () => {
  await receiver.close();
  await stack.stop();
});

const W = '/api/v1/webhooks';
const WHSEC = /^whsec_[A-Za-z0-9+/]{43}=$/;

async function register(account: Account, path: string, secret?: string) {
  const res = await api.post(W, { url: `${receiver.url}${path}`, events: ['project.created'], secret }, { token: account.accessToken });
  if (res.status !== 201) throw new Error(`registration failed: ${res.status} ${res.text}`);
  return res.body.data as { id: string; secret?: string };
}

async function rotate(account: Account, id: string, body?: object) {
  const res = await api.post(`${W}/${id}/rotate-secret`, body, { token: account.accessToken });
  if (res.status !== 200) throw new Error(`rotation failed: ${res.status} ${res.text}`);
  return res.body.data as { secret: string; graceEndsAt: string | null };
}

/** Makes a project and returns the delivery of its project.created at `path`. */
async function deliveryAt(account: Account, path: string): Promise<Received> {
  const p = (await api.post('/api/v1/projects', { name: `P ${Date.now()}` }, { token: account.accessToken })).body.data;
  await eventually(async () => receiver.at(path).some((r) => r.json?.data?.id === p.id), 10_000);
  return receiver.at(path).find((r) => r.json.data.id === p.id)!;
}

/** The check a receiver makes with the package's defaults: `new Webhook(secret)`, no options. */
function verifiesWith(r: Received, secret: string): boolean {
  const headers = {
    'webhook-id': String(r.headers['webhook-id']),
    'webhook-timestamp': String(r.headers['webhook-timestamp']),
    'webhook-signature': String(r.headers['webhook-signature']),
  };
  try {
    expect(new Webhook(secret).verify(r.body, headers)).toEqual(r.json);
    return true;
  } catch (err) {
    if ((err as Error).name === 'WebhookVerificationError') return false;
    throw err;
  }
}

const signatureCount = (r: Received) => String(r.headers['webhook-signature']).split(' ').length;

describe('generated secrets', () => {
  it('generates a whsec_ secret when none is given, shows it once, and signs so that standardwebhooks verifies with no options', async () => {
    const created = await api.post(W, { url: `${receiver.url}/generated`, events: ['project.created'] }, { token: owner.accessToken });
    expect(created.status).toBe(201);
    const { secret, ...hook } = created.body.data;
    expect(secret).toMatch(WHSEC);
    expect(Buffer.from(secret.slice('whsec_'.length), 'base64')).toHaveLength(32);
    expect(hook).toMatchObject({ id: expect.stringMatching(/^whk_/), active: true });
    // Never again: not on a read, a list or an update.
    const token = owner.accessToken;
    for (const res of [
      await api.get(`${W}/${hook.id}`, { token }),
      await api.get(W, { token }),
      await api.patch(`${W}/${hook.id}`, { events: ['project.created'] }, { token }),
    ]) {
      expect(res.status).toBe(200);
      expect(res.text).not.toContain(secret);
      expect(res.text).not.toContain('"secret"');
    }

    const r = await deliveryAt(owner, '/generated');
    expect(signatureCount(r)).toBe(1);
    expect(verifiesWith(r, secret)).toBe(true);
    // Keyed with the decoded bytes, not the text.
    expect(verifyByHand(r, secret)).toBe(false);
    expect(verifiesWith({ ...r, body: r.body.replace('"type"', '"kind"') }, secret)).toBe(false);
    // Each registration gets its own.
    const other = await register(owner, '/generated-2');
    expect(other.secret).toMatch(WHSEC);
    expect(other.secret).not.toBe(secret);
  });

  it('keys a given whsec_ secret with its decoded bytes and any other with its UTF-8 bytes', async () => {
    const given = `whsec_${Buffer.from('a 24-byte secret, chosen').toString('base64')}`;
    const standard = await register(owner, '/given-whsec', given);
    expect(standard.secret).toBeUndefined();
    const r = await deliveryAt(owner, '/given-whsec');
    expect(verifiesWith(r, given)).toBe(true);

    const plain = 'a plain secret, ünïcode';
    await register(owner, '/given-plain', plain);
    const p = await deliveryAt(owner, '/given-plain');
    expect(verifyByHand(p, plain)).toBe(true);
    expect(verifyWithStandardWebhooks(p, plain)).toEqual(p.json);

    // A PATCH to a whsec_ secret switches to its decoded bytes from the next delivery on.
    const hook = await register(owner, '/patched', plain);
    const next = `whsec_${Buffer.alloc(40, 7).toString('base64')}`;
    expect((await api.patch(`${W}/${hook.id}`, { secret: next }, { token: owner.accessToken })).status).toBe(200);
    expect(verifiesWith(await deliveryAt(owner, '/patched'), next)).toBe(true);
  });

  it.each([
    ['not base64', 'whsec_console_secret_123456'],
    ['too few bytes', `whsec_${Buffer.alloc(16, 1).toString('base64')}`],
    ['too many bytes', `whsec_${Buffer.alloc(65, 1).toString('base64')}`],
    ['base64 without its padding', `whsec_${Buffer.alloc(32, 1).toString('base64').replace(/=+$/, '')}`],
  ])('keys a whsec_-prefixed secret that is %s (not the Standard Webhooks form) with its UTF-8 bytes', async (name, secret) => {
    const path = `/utf8-${name.replace(/ /g, '-')}`;
    await register(owner, path, secret);
    const r = await deliveryAt(owner, path);
    expect(verifyByHand(r, secret)).toBe(true);
  });

  it('refuses an empty secret with a 400 naming it', async () => {
    const body = { url: `${receiver.url}/bad`, events: ['project.created'], secret: '' };
    const err = expectError(await api.post(W, body, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expect(err.details.fields.map((f: { field: string }) => f.field)).toEqual(['secret']);
  });
});

describe('secret rotation', () => {
  it('signs with both secrets during the grace period and with the new one only after it', async () => {
    const first = 'the original secret';
    const hook = await register(owner, '/rotating', first);
    const before = Date.now();
    const second = await rotate(owner, hook.id);
    expect(second.secret).toMatch(WHSEC);
    // The default grace: 24 hours from the rotation.
    const endsIn = Date.parse(second.graceEndsAt!) - before;
    expect(endsIn).toBeGreaterThanOrEqual(24 * 3_600_000 - 1000);
    expect(endsIn).toBeLessThanOrEqual(24 * 3_600_000 + 60_000);

    // During the grace period a receiver with either secret verifies.
    const during = await deliveryAt(owner, '/rotating');
    expect(signatureCount(during)).toBe(2);
    expect(verifiesWith(during, second.secret)).toBe(true);
    expect(verifyWithStandardWebhooks(during, first)).toEqual(during.json);

    // A second rotation with a grace of a second: the first secret is gone at once (only the last one is kept)...
    const third = await rotate(owner, hook.id, { graceHours: 1 / 3600 });
    const soon = await deliveryAt(owner, '/rotating');
    expect(verifiesWith(soon, third.secret)).toBe(true);
    expect(verifyByHand(soon, first)).toBe(false);
    // ... and once its grace period is over, only the newest secret signs.
    const graceEnd = Date.parse(third.graceEndsAt!);
    await eventually(async () => Date.now() > graceEnd, 10_000);
    const after = await deliveryAt(owner, '/rotating');
    expect(signatureCount(after)).toBe(1);
    expect(verifiesWith(after, third.secret)).toBe(true);
    expect(verifiesWith(after, second.secret)).toBe(false);
  });

  it('stops the previous secret at once with graceHours 0, and a secret set by hand ends a grace period', async () => {
    const hook = await register(owner, '/immediate');
    const rotated = await rotate(owner, hook.id, { graceHours: 0 });
    expect(rotated.graceEndsAt).toBeNull();
    const r = await deliveryAt(owner, '/immediate');
    expect(signatureCount(r)).toBe(1);
    expect(verifiesWith(r, rotated.secret)).toBe(true);

    await rotate(owner, hook.id); // 24 hours of grace...
    const byHand = 'a secret set by hand';
    expect((await api.patch(`${W}/${hook.id}`, { secret: byHand }, { token: owner.accessToken })).status).toBe(200);
    const patched = await deliveryAt(owner, '/immediate'); // ... ended by the PATCH
    expect(signatureCount(patched)).toBe(1);
    expect(verifyByHand(patched, byHand)).toBe(true);
  });

  it('builds each of two concurrent rotations on the other: both secrets verify', async () => {
    const hook = await register(owner, '/concurrent');
    const [a, b] = await Promise.all([rotate(owner, hook.id), rotate(owner, hook.id)]);
    expect(a.secret).not.toBe(b.secret);
    const r = await deliveryAt(owner, '/concurrent');
    expect(signatureCount(r)).toBe(2);
    expect(verifiesWith(r, a.secret)).toBe(true);
    expect(verifiesWith(r, b.secret)).toBe(true);
  });

  it('keeps the previous secret encrypted at rest', async () => {
    const marker = 'plaintext-marker-before-rotation';
    const hook = await register(owner, '/sealed', marker);
    const { secret } = await rotate(owner, hook.id);
    const db = new Database(join(stack.dataDir, 'webhooks.db'), { readonly: true });
    try {
      const { doc } = db.prepare(`SELECT doc FROM webhooks WHERE id = ?`).get(hook.id) as { doc: string };
      expect(doc).not.toContain(marker);
      expect(doc).not.toContain(secret.slice('whsec_'.length));
      expect(JSON.parse(doc)).toMatchObject({
        secretSealed: expect.stringMatching(/^v1\./),
        previousSecret: { sealed: expect.stringMatching(/^v1\./) },
      });
    } finally {
      db.close();
    }
  });

  it.each([
    ['a negative grace', { graceHours: -1 }],
    ['a grace beyond a week', { graceHours: 168.5 }],
    ['a grace that is not a number', { graceHours: 'soon' }],
    ['an unknown field', { secret: 'whsec_chosen' }],
  ])('refuses %s with a 400', async (_name, body) => {
    const hook = await register(owner, '/refused');
    const err = expectError(await api.post(`${W}/${hook.id}/rotate-secret`, body, { token: owner.accessToken }), 400, 'VALIDATION_ERROR');
    expect(err.details.fields.length).toBeGreaterThan(0);
  });

  it("is another tenant's 404, and needs a credential without a scope list", async () => {
    const hook = await register(owner, '/guarded');
    const intruder = await signUp(api, 'Rotating intruder');
    expect(
      expectError(await api.post(`${W}/${hook.id}/rotate-secret`, {}, { token: intruder.accessToken }), 404, 'RESOURCE_NOT_FOUND').details,
    ).toEqual({ resource: 'webhook', id: hook.id });
    expectError(await api.post(`${W}/whk_doesnotexist/rotate-secret`, {}, { token: owner.accessToken }), 404, 'RESOURCE_NOT_FOUND');
    const scoped = await createKey(api, owner.accessToken, { scopes: ['projects:read'] });
    expectError(await api.post(`${W}/${hook.id}/rotate-secret`, {}, { token: scoped.key }), 403, 'FORBIDDEN');
    expectError(await api.post(`${W}/${hook.id}/rotate-secret`), 401, 'UNAUTHORIZED');
    // Nothing changed: the registration still signs with its original secret alone.
    const r = await deliveryAt(owner, '/guarded');
    expect(signatureCount(r)).toBe(1);
  });
});

describe('documentation', () => {
  it('shows in /docs and the OpenAPI document how to verify with standardwebhooks', async () => {
    const docs = await api.get('/docs');
    expect(docs.text).toContain('id="verifying-webhooks"');
    expect(docs.text).toContain('new Webhook(process.env.WEBHOOK_SECRET!)');
    // ... and the rest of the SDK and CLI surface: idempotency, the live event stream, svc listen, profiles, completion.
    for (const shown of ['id="idempotency"', 'Idempotent-Replayed: true', 'id="live-events"', 'svc.events.stream()'])
      expect(docs.text).toContain(shown);
    for (const command of ['svc listen --forward-to', 'svc login --profile', 'svc api GET', '--all --json', 'svc completion bash'])
      expect(docs.text).toContain(command);
    const doc = (await api.get('/api/v1/openapi.json')).body;
    for (const op of [doc.paths['/api/v1/webhooks'].post, doc.paths['/api/v1/webhooks/{id}/rotate-secret'].post])
      expect(op.description).toContain(VERIFY_WEBHOOK_TS);
  });

  it("the documented receiver accepts a real delivery with the webhook's secret and refuses it with another", async () => {
    // The example of /docs, run as it is shown (its port aside) with tsx, in a folder that sees the repository's packages.
    const dir = mkdtempSync(join(tmpdir(), 'svc-verify-'));
    symlinkSync(join(__dirname, '../../node_modules'), join(dir, 'node_modules'));
    writeFileSync(join(dir, 'receiver.ts'), VERIFY_WEBHOOK_TS.replace('.listen(3000)', '.listen(Number(process.env.PORT))'));
    const port = await freePort();
    const url = `http://127.0.0.1:${port}/`;
    let child: ChildProcess | null = null;
    try {
      // Two registrations send to the receiver, which holds the first one's secret.
      const right = (await api.post(W, { url, events: ['project.created'] }, { token: owner.accessToken })).body.data;
      const wrong = (await api.post(W, { url, events: ['project.created'] }, { token: owner.accessToken })).body.data;
      child = spawn(process.execPath, ['--import', 'tsx', join(dir, 'receiver.ts')], {
        cwd: dir,
        env: { PATH: process.env.PATH, WEBHOOK_SECRET: right.secret, PORT: String(port) },
        stdio: 'ignore',
      });
      // Up when it answers an unsigned request (with a 400).
      await eventually(async () => (await fetch(url, { method: 'POST' }).catch(() => null))?.status === 400, 20_000);
      await api.post('/api/v1/projects', { name: 'Verified by the docs' }, { token: owner.accessToken });
      const firstAttempt = async (id: string) =>
        (await api.get(`${W}/${id}/deliveries`, { token: owner.accessToken })).body.data[0]?.attempts[0] as
          { statusCode: number } | undefined;
      await eventually(async () => Boolean((await firstAttempt(right.id)) && (await firstAttempt(wrong.id))), 10_000);
      expect((await firstAttempt(right.id))!.statusCode).toBe(204);
      expect((await firstAttempt(wrong.id))!.statusCode).toBe(400);
    } finally {
      child?.kill();
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

/** A loopback port free at this moment. */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as AddressInfo;
      server.close(() => resolve(port));
    });
  });
}
