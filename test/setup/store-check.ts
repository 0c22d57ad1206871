/**
 * Every jest project: stores opened in test processes refuse, at once, a store-level operation or a nested
 * store.transaction() called inside a transaction's callback (packages/kit/src/storage/tx-flow.ts), which in production
 * would not join the transaction (on SQLite: wait for it until the lock wait limit).
 */
process.env.STORE_TX_FLOW_CHECK = '1';
