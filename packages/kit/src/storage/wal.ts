import type Database from 'better-sqlite3';

/**
 * Switches a connection's schema to WAL journaling. The switch needs the file to itself for a moment, and SQLite
 * answers SQLITE_BUSY at once, without waiting through the busy timeout, when it would otherwise risk a deadlock
 * with another connection's lock. Several processes opening one file together (replicas on a shared store, every
 * service on the embedded bus) meet that at start-up, so the switch is tried again for up to `waitMs`.
 */
export function useWal(db: Database.Database, schema = 'main', waitMs = 10_000): void {
  const deadline = Date.now() + waitMs;
  for (let attempt = 0; ; attempt++) {
    try {
      db.exec(`PRAGMA ${schema}.journal_mode = WAL`);
      return;
    } catch (err) {
      if ((err as { code?: string }).code !== 'SQLITE_BUSY' || Date.now() >= deadline) throw err;
      // A short, growing, jittered pause (start-up only; nothing else runs on this connection yet).
      Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, Math.min(200, 5 * 2 ** Math.min(attempt, 5)) + Math.random() * 10);
    }
  }
}
