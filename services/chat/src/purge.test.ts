import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteStore, type Store } from '@svc/kit';
import { responses, type ResponseDoc } from './collections';
import { purgeExpiredResponses } from './purge';

let dir: string;
let store: Store;
beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'chat-purge-'));
  store = openSqliteStore({ path: join(dir, 'chat.db') });
  await store.ensure(responses);
});
afterAll(async () => {
  await store.close();
  rmSync(dir, { recursive: true, force: true });
});

const doc = (id: string, expiresAt: string): ResponseDoc => ({
  id,
  tenantId: 'ten_1',
  messageId: `msg_${id}`,
  sessionId: 'chs_1',
  model: 'm',
  background: false,
  store: true,
  previousResponseId: '',
  instructions: '',
  metadata: '{}',
  echo: '{}',
  createdAt: '2026-01-01T00:00:00.000Z',
  expiresAt,
});

it('deletes the responses whose retention ended, in pages, and keeps the others', async () => {
  const col = store.collection(responses);
  // More than a page of expired ones, inserted out of order, and two still kept.
  for (let i = 0; i < 450; i++) await col.insert(doc(`resp_old${i}`, new Date(Date.UTC(2026, 0, 2, 0, 0, 449 - i)).toISOString()));
  await col.insert(doc('resp_kept1', '2026-01-03T00:00:00.000Z'));
  await col.insert(doc('resp_kept2', '2026-01-02T06:00:00.000Z'));
  expect(await purgeExpiredResponses(store, '2026-01-02T01:00:00.000Z')).toBe(450);
  expect((await col.find({}, { limit: 100 })).items.map((r) => r.id).sort()).toEqual(['resp_kept1', 'resp_kept2']);
  expect(await purgeExpiredResponses(store, '2026-01-02T12:00:00.000Z')).toBe(1);
  expect((await col.find({}, { limit: 100 })).items.map((r) => r.id)).toEqual(['resp_kept1']);
});
