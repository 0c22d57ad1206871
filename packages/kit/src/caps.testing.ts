/**
 * What each service's cap test shares: a fresh SQLite store per test, and creates racing for a tenant's places
 * through its TenantCap. Test support only (jest globals); services' `caps.test.ts` import it.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppError } from './errors';
import type { TenantCap } from './caps';
import { openSqliteStore, type Store, type StoreSession } from './storage';

/** A store of its own for each test of the file, removed after it. */
export function storePerTest(name: string): () => Store {
  let dir = '';
  let store: Store | null = null;
  beforeEach(() => {
    dir = mkdtempSync(join(tmpdir(), `${name}-caps-`));
    store = openSqliteStore({ path: join(dir, `${name}.db`) });
  });
  afterEach(async () => {
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
  });
  return () => store!;
}

/** `count` creates at once through `cap`; how many got a place. Every other one must be the cap's refusal. */
export async function raceForPlaces(
  cap: TenantCap,
  tenantId: string,
  count: number,
  insert: (i: number) => (tx: StoreSession) => Promise<unknown>,
): Promise<number> {
  const outcomes = await Promise.allSettled(
    Array.from({ length: count }, (_, i) =>
      cap.transaction(tenantId, async (tx, places) => {
        await places.take();
        await insert(i)(tx);
      }),
    ),
  );
  for (const o of outcomes) if (o.status === 'rejected' && !(o.reason instanceof AppError)) throw o.reason;
  return outcomes.filter((o) => o.status === 'fulfilled').length;
}
export * from './crash.testing';
