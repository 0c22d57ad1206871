/**
 * Crash points for the `fixtures/crash-*` processes of services' tests: the real store, with a SIGKILL of the process
 * as its first transaction starts (`before-commit`) or right after it commits (`after-commit`): a power cut, not an
 * error, so nothing after the commit (the answer, any cleanup) runs.
 */
import type { Store } from './storage';

const crash = (): never => {
  process.kill(process.pid, 'SIGKILL');
  throw new Error('unreachable');
};

export function crashingStore(store: Store, point: string): Store {
  return new Proxy(store, {
    get(target, prop) {
      if (prop === 'transaction')
        return async (fn: Parameters<Store['transaction']>[0]) => {
          if (point === 'before-commit') crash();
          await target.transaction(fn);
          return crash();
        };
      const value = Reflect.get(target, prop) as unknown;
      return typeof value === 'function' ? (value as (...a: unknown[]) => unknown).bind(target) : value;
    },
  });
}
