import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { startFakeOpenAI, type FakeProviderServer } from '@svc/llm/testing';
import { client, createKey, eventually, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';

// Issue 32: chat processes carve their calls' holds from escrowed slices of the tenant's credit (CHAT_CREDIT_ESCROW),
// with two chat replicas and billing SIGKILLed and restarted while calls run. Slices are carved with billing down
// (no round trip), their usage waits in chat's outbox, and the restarted billing settles them. A tenant with credit
// for 100 calls gets more than 100 calls' worth of requests: whatever is accepted, its balance never falls below
// zero (sampled throughout), every call the provider answered is billed once, the balance is what the ledger says,
// and once the slices go back nothing stays reserved.
jest.setTimeout(180_000);

const API_KEY = 'sk-escrow-' + 'e'.repeat(30);
const ADMIN = 'admin-token-escrow';
const MODEL = 'gpt-escrow';
// A call reserves its prompt bound plus LLM_MAX_TOKENS (99) at a credit a token, and uses 100 (1 + 99).
const PER_CALL = 100;
const BALANCE = 100 * PER_CALL;
let dataDir: string;
let fake: FakeProviderServer;
let system: SystemProcess | null = null;

function billingDb() {
  const db = new Database(join(dataDir, 'billing.db'), { readonly: true });
  try {
    const docs = (table: string) => (db.prepare(`SELECT doc FROM ${table}`).all() as Array<{ doc: string }>).map((r) => JSON.parse(r.doc));
    return { ledger: docs('ledger'), escrows: docs('escrows'), reservations: docs('reservations') };
  } finally {
    db.close();
  }
}

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-escrow-'));
  fake = await startFakeOpenAI({ apiKey: API_KEY });
  fake.setDefault(() => ({ type: 'text', text: 'done', delayMs: 30, usage: { inputTokens: 1, outputTokens: 99 } }));
  system = await startSystem({
    DATA_DIR: dataDir,
    SVC_LAYOUT: 'per-service',
    REPLICAS: '2',
    REPLICATED_SERVICES: 'chat',
    SVC_ADMIN_TOKEN: ADMIN,
    EGRESS_ALLOW_PRIVATE: 'true',
    RATE_LIMIT_MAX: '1000000',
    BILLING_STARTING_GRANT: '0',
    CREDITS_PER_1K_TOKENS: '1000',
    LLM_MAX_TOKENS: '99',
    CHAT_CREDIT_ESCROW: 'true',
    BILLING_ESCROW_LEASE_MS: '3000',
    BILLING_RESERVATION_TTL_MS: '30000',
    CHAT_TENANT_CONCURRENCY: '100',
    GRPC_DEADLINE_MS: '30000',
  });
});
afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await fake?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

it('never lets the balance fall below zero across two chat replicas carving escrowed slices and a billing restart', async () => {
  const sys = system!;
  const api = client(sys.url);
  const owner = await signUp(api, 'Escrow');
  const t = { token: owner.accessToken };
  const admin = { headers: { authorization: `Bearer ${ADMIN}` } };
  await eventually(
    async () =>
      (await api.post(`/api/v1/admin/tenants/${owner.tenantId}/credits`, { delta: BALANCE, reason: 'test' }, admin)).status === 200,
  );
  const llm = { provider: 'openai', baseUrl: fake.url, model: MODEL, apiKey: API_KEY };
  expect((await api.patch('/api/v1/tenant/settings/llm', llm, t)).status).toBe(200);
  const { key } = await createKey(api, owner.accessToken);

  // The balance as billing stores it, sampled all along (the summary is a 503 while billing is down).
  const balances: number[] = [];
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      const res = await api.get('/api/v1/billing/summary', t).catch(() => null);
      if (res?.status === 200) balances.push(res.body.data.credits.balance);
      await new Promise((r) => setTimeout(r, 50));
    }
  })();

  const statuses: number[] = [];
  const call = async (n: number) => {
    const res = await fetch(`${sys.url}/v1/chat/completions`, {
      method: 'POST',
      headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: `hi ${n}` }] }),
    });
    statuses.push(res.status);
    await res.arrayBuffer();
  };
  const wave = (from: number, n: number) => Promise.all(Array.from({ length: n }, (_, i) => call(from + i)));

  // Enough to be granted slices on both replicas, then billing dies while more calls come: those carved from a slice
  // still run (the lease is timed on chat's clock), the rest are refused (503), none unchecked.
  // round_robin sends calls only to the chat replicas it has connected to: calls go until both hold a slice.
  const holders = () =>
    new Set(
      billingDb()
        .escrows.filter((e) => e.tenantId === owner.tenantId)
        .map((e) => e.holder),
    ).size;
  let sent = 0;
  await eventually(async () => {
    await wave(sent, 10);
    sent += 10;
    return holders() >= 2;
  }, 60_000);
  const killed = await sys.killService('billing');
  await wave(100, 30);
  await sys.restarted('billing', killed);
  // Past the balance: the rest get 402 once the credit is spent. Chat's channel to the restarted billing may still be
  // in its reconnect back-off (503s meanwhile), so waves go on until the refusals come.
  let round = 0;
  await eventually(async () => {
    await wave(200 + round++ * 20, 20);
    return statuses.includes(402);
  }, 60_000);
  await new Promise((r) => setTimeout(r, 500));

  const ok = statuses.filter((s) => s === 200).length;
  expect(statuses.filter((s) => ![200, 402, 503].includes(s))).toEqual([]);
  expect(statuses.filter((s) => s === 402).length).toBeGreaterThan(0);

  // Every answered call settles; the slices go back once idle: nothing reserved, the balance what was spent.
  await eventually(async () => {
    const res = await api.get('/api/v1/billing/summary', t);
    return res.status === 200 && res.body.data.credits.reserved === 0 && res.body.data.usage.calls === ok;
  }, 60_000);
  sampling = false;
  await sampler;
  const { credits, usage } = (await api.get('/api/v1/billing/summary', t)).body.data;
  expect(usage.calls).toBe(ok);
  expect(credits).toEqual({ balance: BALANCE - ok * PER_CALL, reserved: 0, available: BALANCE - ok * PER_CALL });
  expect(balances.length).toBeGreaterThan(0);
  expect(Math.min(...balances, credits.balance)).toBeGreaterThanOrEqual(0);
  expect(ok).toBeLessThanOrEqual(BALANCE / PER_CALL);
  // Each provider call billed once; the ledger adds up to the balance.
  expect(fake.requests.length).toBe(ok);
  const db = billingDb();
  const mine = db.ledger.filter((e) => e.tenantId === owner.tenantId);
  expect(mine.filter((e) => e.kind === 'usage')).toHaveLength(ok);
  expect(mine.reduce((sum, e) => sum + e.credits, 0)).toBe(credits.balance);
  // The calls did go through escrows, granted to both chat processes (a new holder id at every start).
  const escrows = db.escrows.filter((e) => e.tenantId === owner.tenantId);
  expect(new Set(escrows.map((e) => e.holder)).size).toBeGreaterThanOrEqual(2);
  const carved = ok - db.reservations.filter((r) => r.tenantId === owner.tenantId && r.status === 'settled').length;
  expect(carved).toBeGreaterThan(0);
  expect(escrows.every((e) => e.remaining === 0)).toBe(true);
});
