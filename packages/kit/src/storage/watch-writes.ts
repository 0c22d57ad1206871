import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';

/** One directory watch per directory and process, shared by every listener of the files in it. */
const watches = new Map<string, { watcher: FSWatcher; listeners: Map<string, Set<() => void>> }>();

function watchDirectory(dir: string): (typeof watches extends Map<string, infer W> ? W : never) | null {
  const existing = watches.get(dir);
  if (existing) return existing;
  try {
    const listeners = new Map<string, Set<() => void>>();
    const watcher = watch(dir, { persistent: false }, (_event, file) => {
      if (file === null) for (const set of listeners.values()) for (const l of set) l();
      else for (const l of listeners.get(file) ?? []) l();
    });
    const entry = { watcher, listeners };
    // The safety polls still find the work.
    watcher.on('error', () => {
      watcher.close();
      if (watches.get(dir) === entry) watches.delete(dir);
    });
    watches.set(dir, entry);
    return entry;
  } catch {
    return null;
  }
}

/**
 * Calls `listener` soon after any process commits to the SQLite database at `dbPath` (its WAL changes): inotify on
 * Linux, so nothing runs while nothing is written. Notifications are hints (a process's own writes count too, and one
 * can be missed): keep a slow safety poll beside it. With `debounceMs`, a burst of writes calls it once at most that
 * often. Returns the function that stops watching; a directory that cannot be watched returns a no-op.
 */
export function watchWrites(dbPath: string, listener: () => void, debounceMs = 0): () => void {
  if (dbPath === ':memory:' || dbPath === '') return () => {};
  const dir = dirname(dbPath);
  const entry = watchDirectory(dir);
  if (!entry) return () => {};
  const { fire, cancel } = debounced(listener, debounceMs);
  const names = [basename(dbPath), `${basename(dbPath)}-wal`];
  for (const name of names) {
    if (!entry.listeners.has(name)) entry.listeners.set(name, new Set());
    entry.listeners.get(name)!.add(fire);
  }
  return () => {
    cancel();
    for (const name of names) {
      const set = entry.listeners.get(name);
      set?.delete(fire);
      if (set?.size === 0) entry.listeners.delete(name);
    }
    if (entry.listeners.size === 0 && watches.get(dir) === entry) {
      entry.watcher.close();
      watches.delete(dir);
    }
  };
}

/**
 * `listener` called at most once every `ms` for a burst of `fire`s (at the end of the first `ms`); at once when `ms`
 * is 0. `cancel` drops a call still waiting. Shared by the stores' write hints.
 */
export function debounced(listener: () => void, ms: number): { fire(): void; cancel(): void } {
  let timer: NodeJS.Timeout | null = null;
  return {
    fire() {
      if (ms <= 0) return listener();
      timer ??= setTimeout(() => {
        timer = null;
        listener();
      }, ms);
    },
    cancel() {
      if (timer) clearTimeout(timer);
      timer = null;
    },
  };
}
