import Database from 'better-sqlite3';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { sendSignal, watchSignal, watchWrites } from './watch-writes';

// The wake-up hints of feeds and relays: a commit to one database wakes its listeners, not those of another
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

it('hears a database whose WAL appears after the watch began, and one deleted and made again', async () => {
  const heard: number[] = [];
  const stop = watchWrites(join(dir, 'late.db'), () => heard.push(Date.now()));
  try {
    // Nothing exists yet: the watch waits through the directory, and a write to another file there is not heard.
    const other = open('other.db');
    other.prepare('INSERT INTO t VALUES (?)').run('x');
    other.close();
    await settle();
    expect(heard).toHaveLength(0);

    let late = open('late.db');
    await settle();
    heard.length = 0;
    late.prepare('INSERT INTO t VALUES (?)').run('1');
    await settle();
    expect(heard.length).toBeGreaterThanOrEqual(1);

    // The last connection closes (SQLite deletes the WAL), then the database is opened and written again.
    late.close();
    await settle();
    late = open('late.db');
    await settle();
    heard.length = 0;
    late.prepare('INSERT INTO t VALUES (?)').run('2');
    await settle();
    expect(heard.length).toBeGreaterThanOrEqual(1);
    late.close();
  } finally {
    stop();
  }
});

it('a signal wakes the watchers of its own path only', async () => {
  const heard = { a: 0, b: 0 };
  const stops = [watchSignal(join(dir, 'signals', 'a'), () => heard.a++), watchSignal(join(dir, 'signals', 'b'), () => heard.b++)];
  try {
    sendSignal(join(dir, 'signals', 'a'));
    sendSignal(join(dir, 'signals', 'a'));
    await settle();
    expect(heard.a).toBeGreaterThanOrEqual(1);
    expect(heard.b).toBe(0);
    sendSignal(join(dir, 'signals', 'b'));
    await settle();
    expect(heard.b).toBeGreaterThanOrEqual(1);
  } finally {
    for (const stop of stops) stop();
  }
  const before = { ...heard };
  sendSignal(join(dir, 'signals', 'a'));
  await settle();
  expect(heard).toEqual(before);
});
