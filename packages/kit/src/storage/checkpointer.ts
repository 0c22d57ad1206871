/**
 * WAL checkpoints off the event loop. SQLite's automatic checkpoint runs inside whichever commit crosses the WAL's
 * size limit: that commit copies the WAL into the database file and fsyncs both, on the event loop, while every
 * request of the process waits (most of a commit's ~150 µs on average, milliseconds at the spikes). Here one worker
 * thread per process, with its own connection to each file, runs a PASSIVE checkpoint (it never blocks a writer or
 * a reader) shortly after a process wrote to it a few times. The WAL stays short, which also keeps reads fast: a page rewritten
 * by every commit (a counter, the outbox) is looked up through every copy of it in the WAL.
 *
 * The connection's own automatic checkpoint stays on at a larger size, as a bound should the worker fall behind.
 */
import { Worker } from 'node:worker_threads';

/** How soon after a write its file is checkpointed; a burst of commits is one checkpoint. */
const CHECKPOINT_DELAY_MS = 100;
/**
 * Commits to a file before it is worth a checkpoint. An idle system still writes now and then (a relay's lease
 * heartbeat every few seconds): those wait for a few more rather than cost a checkpoint (and the wake-ups its write
 * to the file causes) each.
 */
const CHECKPOINT_AFTER_COMMITS = 16;
/** The writing connection's own automatic checkpoint, in pages: the bound if the worker falls behind. */
const FALLBACK_AUTOCHECKPOINT_PAGES = 4000;

// CommonJS run by the worker: it opens each file once and checkpoints the ones it is sent.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const Database = require(workerData.sqlite);
const open = new Map();
parentPort.on('message', ({ checkpoint = [], close = [] }) => {
  for (const path of checkpoint) {
    try {
      let db = open.get(path);
      if (!db) {
        db = new Database(path, { fileMustExist: true });
        db.pragma('busy_timeout = 1000');
        open.set(path, db);
      }
      db.pragma('wal_checkpoint(PASSIVE)');
    } catch {
      // busy or gone: the next write tries again, and the writer's own checkpoint bounds the WAL meanwhile
    }
  }
  for (const path of close) {
    try { open.get(path)?.close(); } catch {}
    open.delete(path);
  }
});
`;

let worker: Worker | null = null;
/** Files with enough commits since their last checkpoint, waiting for the timer. */
const dirty = new Set<string>();
/** Commits since the last checkpoint, per file. */
const commits = new Map<string, number>();
let timer: NodeJS.Timeout | null = null;

function post(message: { checkpoint?: string[]; close?: string[] }): void {
  worker ??= startWorker();
  worker?.postMessage(message);
}

function startWorker(): Worker | null {
  try {
    const w = new Worker(WORKER_SOURCE, { eval: true, workerData: { sqlite: require.resolve('better-sqlite3') } });
    w.unref(); // never what keeps a process alive
    w.on('error', () => {
      // The writers' own checkpoints take over; a later write starts a new worker.
      if (worker === w) worker = null;
    });
    return w;
  } catch {
    return null;
  }
}

/** An in-memory database (`:memory:`, or '' for a temporary one) has no WAL to checkpoint. */
const inMemory = (path: string) => path === ':memory:' || path === '';

/**
 * Hands the checkpoints of the database `db` opened at `path` to this module: its own automatic checkpoint stays only
 * as the bound should the worker fall behind. Its owner then reports commits (`walWritten`) and the close (`walClosed`).
 */
export function checkpointElsewhere(db: { pragma(source: string): unknown }, path: string): void {
  if (!inMemory(path)) db.pragma(`wal_autocheckpoint = ${FALLBACK_AUTOCHECKPOINT_PAGES}`);
}

/** A commit went to the database at `path`: checkpoint it soon, off the event loop. */
export function walWritten(path: string): void {
  if (inMemory(path) || dirty.has(path)) return;
  const n = (commits.get(path) ?? 0) + 1;
  if (n < CHECKPOINT_AFTER_COMMITS) {
    commits.set(path, n);
    return;
  }
  commits.delete(path);
  dirty.add(path);
  timer ??= setTimeout(() => {
    timer = null;
    const checkpoint = [...dirty];
    dirty.clear();
    post({ checkpoint });
  }, CHECKPOINT_DELAY_MS).unref();
}

/** The database at `path` is closed here: the worker closes its connection too (and forgets a pending checkpoint). */
export function walClosed(path: string): void {
  if (inMemory(path)) return;
  dirty.delete(path);
  commits.delete(path);
  if (worker) worker.postMessage({ close: [path] });
}
