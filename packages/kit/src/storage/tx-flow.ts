/**
 * Inside a transaction's callback only the session it is given belongs to the transaction: a store-level operation
 * (`store.collection(def)...`) or a nested `store.transaction()` called from there does not join it. The stores do not
 * follow a transaction's async flow in production, because the only way to on Node 20 (an AsyncLocalStorage) runs
 * async hooks on every promise of the process (5-6 % of a model call's CPU, docs/decisions.md). On SQLite such a call
 * would wait for the very transaction it runs in (the store's lock): it fails after the lock wait limit instead of
 * hanging. With STORE_TX_FLOW_CHECK=1 (every jest run sets it) a store does follow the flow, only to refuse such a
 * call at once, on both adapters, so that the suites find a caller that goes around its session.
 */
import { AsyncLocalStorage } from 'node:async_hooks';

/** Whether stores opened now check their transactions' flows (tests). */
export function txFlowCheckFromEnv(): boolean {
  // eslint-disable-next-line no-restricted-properties -- a switch for test runs (jest's setup), not a setting
  return process.env.STORE_TX_FLOW_CHECK === '1';
}

export class TxFlowError extends Error {
  constructor(what: string) {
    super(
      `${what} inside a transaction's callback does not join the transaction (on SQLite it would wait for it): ` +
        `use the callback's session (tx.collection(def)), or pass it down`,
    );
    this.name = 'TxFlowError';
  }
}

/** Follows open transactions' async flows to refuse what would go around their session (checked mode only). */
export class TxFlowCheck {
  private readonly context = new AsyncLocalStorage<{ open: boolean }>();

  run<R>(tx: { open: boolean }, fn: () => R): R {
    return this.context.run(tx, fn);
  }

  /** Throws when called from inside an open transaction's callback. */
  refuse(what: string): void {
    if (this.context.getStore()?.open) throw new TxFlowError(what);
  }
}
