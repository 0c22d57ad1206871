import { watch, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';

/**
 * Calls `listener` soon after any process commits to the SQLite database at `dbPath` (its WAL changes): inotify on
 * Linux, so nothing runs while nothing is written. Notifications are hints (a process's own writes count too, and one
 * can be missed): keep a slow safety poll beside it. With `debounceMs`, a burst of writes calls it once at most that
 * often. Returns the function that stops watching; a directory that cannot be watched returns a no-op.
 */
export function watchWrites(dbPath: string, listener: () => void, debounceMs = 0): () => void {
  if (dbPath === ':memory:' || dbPath === '') return () => {};
  const name = basename(dbPath);
  let timer: NodeJS.Timeout | null = null;
  const fire = () => {
    if (debounceMs <= 0) return listener();
    timer ??= setTimeout(() => {
      timer = null;
      listener();
    }, debounceMs);
  };
  let watcher: FSWatcher | null = null;
  try {
    watcher = watch(dirname(dbPath), { persistent: false }, (_event, file) => {
      if (file === null || file === name || file === `${name}-wal`) fire();
    });
    watcher.on('error', () => stop()); // the safety poll still finds the work
  } catch {
    watcher = null;
  }
  function stop() {
    watcher?.close();
    watcher = null;
    if (timer) clearTimeout(timer);
    timer = null;
  }
  return stop;
}
