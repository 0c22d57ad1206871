import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { useWal } from './wal';

let dir: string;
beforeEach(() => (dir = mkdtempSync(join(tmpdir(), 'kit-wal-'))));
afterEach(() => rmSync(dir, { recursive: true, force: true }));

/** Another process holds the file's exclusive lock for `ms`; resolves once it has it. */
function holdLock(path: string, ms: number): Promise<{ done: Promise<void> }> {
  const script = `
    const db = new (require('better-sqlite3'))(${JSON.stringify(path)});
    db.exec('BEGIN EXCLUSIVE');
    process.stdout.write('locked\\n');
    setTimeout(() => { db.exec('COMMIT'); db.close(); }, ${ms});`;
  const child = spawn(process.execPath, ['-e', script], { cwd: process.cwd(), stdio: ['ignore', 'pipe', 'inherit'] });
  const done = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return new Promise((resolve) => child.stdout.once('data', () => resolve({ done })));
}

it('switches to WAL once another process lets go of the file, where SQLite answers SQLITE_BUSY at once', async () => {
  const path = join(dir, 'shared.db');
  new Database(path).close();
  const { done } = await holdLock(path, 300);
  const db = new Database(path);
  db.pragma('busy_timeout = 0'); // SQLite's immediate BUSY, as its deadlock avoidance gives it whatever the timeout
  expect(() => db.exec('PRAGMA journal_mode = WAL')).toThrow(expect.objectContaining({ code: 'SQLITE_BUSY' }));
  useWal(db);
  expect(db.pragma('journal_mode', { simple: true })).toBe('wal');
  db.close();
  await done;
});

it('gives up with SQLITE_BUSY after its wait, and throws anything else at once', async () => {
  const path = join(dir, 'held.db');
  new Database(path).close();
  const { done } = await holdLock(path, 1500);
  const db = new Database(path);
  db.pragma('busy_timeout = 0');
  expect(() => useWal(db, 'main', 200)).toThrow(expect.objectContaining({ code: 'SQLITE_BUSY' }));
  expect(() => useWal(db, 'nosuchschema')).toThrow(/unknown database/);
  db.close();
  await done;
});
