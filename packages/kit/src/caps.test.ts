import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { capsContract } from './caps.contract';
import { openSqliteStore } from './storage';

const dir = mkdtempSync(join(tmpdir(), 'kit-caps-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

let files = 0;
// One handle serves both "replicas": a second connection in this process would wait for the first one's lock
// synchronously, and so block the event loop that the first one needs to commit. The interleaving that matters
// (a count, awaits, then the insert) happens on one handle as well; MongoDB runs the contract with two.
capsContract('sqlite', async () => {
  const store = openSqliteStore({ path: join(dir, `caps-${++files}.db`) });
  return [store, store];
});
