/**
 * `npm run bench:audit`: what the audit log adds to a change (issue 22). The transaction of `POST /api-keys`
 * (the key's insert) is timed on identity's SQLite store without and with its audit entry (the actor's email read and
 * the pending entry written in the same transaction), interleaved so both see the same machine; then the time to
 * chain those entries (off the request path). Results go to bench/results/audit.json.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createLogger, newId, nowIso, openSqliteStore, randomBase62, sha256Hex, type CallContext } from '@svc/kit';
import { apiKeys, users, type ApiKeyDoc } from '../services/identity/src/collections';
import { AUDIT_COLLECTIONS, auditChange, AuditChainer } from '../services/identity/src/audit/log';
import { ROOT, runBench } from './lib';

const N = Number(process.env.BENCH_AUDIT_N ?? 2000);
const RESULTS = resolve(ROOT, 'bench/results/audit.json');

const pct = (xs: number[], p: number) => [...xs].sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(xs.length * p))];
const round = (x: number) => Math.round(x * 1000) / 1000;

runBench(async () => {
  const dir = mkdtempSync(join(tmpdir(), 'bench-audit-'));
  const store = await openSqliteStore({ path: join(dir, 'identity.db') });
  try {
    await store.ensure(apiKeys);
    await store.ensure(users);
    for (const def of AUDIT_COLLECTIONS) await store.ensure(def);
    const tenantId = newId('ten');
    const userId = newId('usr');
    await store.collection(users).insert({
      id: userId,
      tenantId,
      email: 'bench@example.com',
      name: 'Bench',
      role: 'owner',
      passwordHash: 'x',
      disabled: false,
      createdAt: nowIso(),
      updatedAt: nowIso(),
    });
    const ctx = {
      auth: { sub: userId, tid: tenantId, typ: 'user', role: 'owner', sid: 'ses_1' },
      token: 't',
      requestId: 'req',
      clientIp: '127.0.0.1',
      userAgent: 'bench',
    } as unknown as CallContext;
    const keyDoc = (): ApiKeyDoc => {
      const key = `svc_sdk_${randomBase62(43)}`;
      return {
        id: newId('key'),
        tenantId,
        createdBy: userId,
        name: 'bench',
        type: 'sdk',
        environment: 'production',
        scopes: [],
        scoped: false,
        start: key.slice(0, 12),
        hash: sha256Hex(key),
        createdAt: nowIso(),
        lastUsedAt: null,
        expiresAt: null,
        revokedAt: null,
        limits: {},
      };
    };
    const without: number[] = [];
    const withAudit: number[] = [];
    for (let i = 0; i < N + 200; i++) {
      const a = keyDoc();
      let t = performance.now();
      await store.transaction(async (tx) => {
        await tx.collection(apiKeys).insert(a);
      });
      const d1 = performance.now() - t;
      const b = keyDoc();
      t = performance.now();
      await store.transaction(async (tx) => {
        await tx.collection(apiKeys).insert(b);
        await auditChange(tx, ctx, tenantId, 'api_key.created', { type: 'api_key', id: b.id }, { after: { name: b.name, start: b.start } });
      });
      const d2 = performance.now() - t;
      if (i >= 200) {
        without.push(d1);
        withAudit.push(d2);
      }
    }
    const chainer = new AuditChainer(store, createLogger('bench', 'silent'), 365);
    const t = performance.now();
    await chainer.drain(null);
    const chainMs = performance.now() - t;
    const verify = await chainer.verify(tenantId);
    const result = {
      at: new Date().toISOString(),
      changes: N,
      transactionMs: {
        withoutAudit: { p50: round(pct(without, 0.5)), p99: round(pct(without, 0.99)) },
        withAudit: { p50: round(pct(withAudit, 0.5)), p99: round(pct(withAudit, 0.99)) },
        addedP50: round(pct(withAudit, 0.5) - pct(without, 0.5)),
      },
      chaining: { entries: verify.entries, perEntryMs: round(chainMs / (N + 200)), valid: verify.valid },
    };
    console.log(JSON.stringify(result, null, 2));
    if (!process.env.BENCH_NO_WRITE) writeFileSync(RESULTS, `${JSON.stringify(result, null, 2)}\n`);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
