import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { watchWrites } from './watch-writes';

// The wake-up hint of relays and bus consumers: a commit to one database wakes its listeners, not those of another
// database in the same directory, and a stopped listener hears nothing.
let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'svc-watch-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

function open(name: string) {
  const db = new Database(join(dir, name));
  db.pragma('journal_mode = WAL');
  db.exec('CREATE TABLE IF NOT EXISTS t (v TEXT)');
  return db;
}

const settle = () => new Promise((r) => setTimeout(r, 150));

it('tells the listeners of the database that was written, once per burst when debounced', async () => {
  const a = open('a.db');
  const b = open('b.db');
  await settle();
  const heard = { a: 0, b: 0, debounced: 0 };
  const stops = [
    watchWrites(join(dir, 'a.db'), () => heard.a++),
    watchWrites(join(dir, 'b.db'), () => heard.b++),
    watchWrites(join(dir, 'a.db'), () => heard.debounced++, 100),
  ];
  for (let i = 0; i < 5; i++) a.prepare('INSERT INTO t VALUES (?)').run(String(i));
  await settle();
  expect(heard.a).toBeGreaterThanOrEqual(1);
  expect(heard.b).toBe(0);
  expect(heard.debounced).toBe(1);

  stops[0]();
  const before = heard.a;
  a.prepare('INSERT INTO t VALUES (?)').run('after stop');
  b.prepare('INSERT INTO t VALUES (?)').run('other');
  await settle();
  expect(heard.a).toBe(before);
  expect(heard.b).toBeGreaterThanOrEqual(1);
  for (const stop of stops) stop();
  a.close();
  b.close();
});
