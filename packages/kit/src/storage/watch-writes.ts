import { closeSync, constants, existsSync, mkdirSync, openSync, watch, writeSync, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';

/** Wait before watching a file again after its watch failed (the callers' safety polls cover the gap). */
const REARM_MS = 1000;

/**
 * The watch of one file in this process, shared by every listener of it. A watch on the file itself, not on its
 * directory: every service keeps its database in DATA_DIR, and a directory watch woke every process of the machine
 * for every write of every service (issue 32: a service taking no part in a model call spent 0.7 ms of CPU on each).
 * A file that does not exist yet is looked for through its directory until it appears; one deleted is watched again.
 */
class FileWatch {
  private static readonly byPath = new Map<string, FileWatch>();
  private readonly listeners = new Set<() => void>();
  private watcher: FSWatcher | null = null;
  private retry: NodeJS.Timeout | null = null;

  private constructor(private readonly path: string) {}

  /** Adds `listener` to the watch of `path` (made on first use); returns the function that removes it. */
  static listen(path: string, listener: () => void): () => void {
    let w = FileWatch.byPath.get(path);
    if (!w) {
      FileWatch.byPath.set(path, (w = new FileWatch(path)));
      w.arm();
    }
    const watch = w;
    watch.listeners.add(listener);
    return () => {
      watch.listeners.delete(listener);
      if (watch.listeners.size > 0 || FileWatch.byPath.get(path) !== watch) return;
      FileWatch.byPath.delete(path);
      watch.close();
    };
  }

  private fire(): void {
    for (const l of [...this.listeners]) l();
  }

  private close(): void {
    if (this.retry) clearTimeout(this.retry);
    this.retry = null;
    this.watcher?.close();
    this.watcher = null;
  }

  private arm(): void {
    this.close();
    let w: FSWatcher;
    try {
      w = watch(this.path, { persistent: false }, (event) => {
        // Deleted or replaced: watch whatever is at the path now (or its directory until something is).
        if (event === 'rename') this.arm();
        this.fire();
      });
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') this.awaitCreation();
      else this.rearmLater();
      return;
    }
    this.watch(w);
  }

  /** Until the file exists, its directory's events for its name (only this name: they are rare). */
  private awaitCreation(): void {
    const name = basename(this.path);
    let w: FSWatcher;
    try {
      w = watch(dirname(this.path), { persistent: false }, (_event, file) => {
        if (file !== null && file !== name) return;
        if (existsSync(this.path)) this.arm();
        this.fire();
      });
    } catch {
      return this.rearmLater();
    }
    this.watch(w);
    if (existsSync(this.path)) this.arm(); // created between the two watches
  }

  private watch(w: FSWatcher): void {
    this.watcher = w;
    w.on('error', () => {
      if (this.watcher !== w) return;
      this.close();
      this.rearmLater();
    });
  }

  private rearmLater(): void {
    if (FileWatch.byPath.get(this.path) !== this) return; // no listener left
    this.retry = setTimeout(() => this.arm(), REARM_MS);
    this.retry.unref();
  }
}

/**
 * Calls `listener` soon after any process commits to the SQLite database at `dbPath` (its WAL changes): inotify on
 * Linux, so nothing runs while nothing is written. Notifications are hints (a process's own writes count too, and one
 * can be missed): keep a slow safety poll beside it. With `debounceMs`, a burst of writes calls it once at most that
 * often. Returns the function that stops watching.
 */
export function watchWrites(dbPath: string, listener: () => void, debounceMs = 0): () => void {
  if (dbPath === ':memory:' || dbPath === '') return () => {};
  const { fire, cancel } = debounced(listener, debounceMs);
  const stops = [dbPath, `${dbPath}-wal`].map((path) => FileWatch.listen(path, fire));
  return () => {
    cancel();
    for (const stop of stops) stop();
  };
}

/**
 * A signal between the processes of one machine: a file written only to wake its watchers (`watchSignal`), so a
 * process wakes for the one thing it waits for (a topic it consumes, its store's outbox) and not for every write to a
 * database it shares. A hint like `watchWrites`: one that fails or is lost is found by the watcher's safety poll.
 */
export function sendSignal(path: string): void {
  try {
    const fd = openSync(path, constants.O_WRONLY | constants.O_CREAT);
    try {
      writeSync(fd, ONE_BYTE, 0, 1, 0);
    } finally {
      closeSync(fd);
    }
  } catch {
    // Its directory is gone or unwritable: the watchers' safety polls find the work.
  }
}
const ONE_BYTE = Buffer.from([1]);

/** Calls `listener` soon after any process sends the signal at `path` (created when missing). */
export function watchSignal(path: string, listener: () => void, debounceMs = 0): () => void {
  try {
    mkdirSync(dirname(path), { recursive: true });
    closeSync(openSync(path, constants.O_WRONLY | constants.O_CREAT));
  } catch {
    // Watched through its directory until it can be made (or the safety polls alone).
  }
  const { fire, cancel } = debounced(listener, debounceMs);
  const stop = FileWatch.listen(path, fire);
  return () => {
    cancel();
    stop();
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
