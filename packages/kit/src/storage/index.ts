export * from './types';
export { encodeCursor, decodeCursor, clampLimit } from './cursor';
export { openSqliteStore } from './sqlite';
export { pages } from './pages';
export { GroupCommit } from './group-commit';

import { openSqliteStore } from './sqlite';
import type { Store } from './types';
import type { IndexReport, MongoStoreOptions } from './mongo';

/** Opens MongoDB; mongoose is loaded only here, so processes that never use it (the gateway) never pay for it. */
export async function openMongoStore(options: MongoStoreOptions): Promise<Store> {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
  const mongo = require('./mongo') as typeof import('./mongo');
  return mongo.openMongoStore(options);
}

/** MongoDB when a URI is configured (distributed mode), else the service's SQLite file (embedded mode). */
export async function openStore(options: {
  mongodbUri?: string;
  /** MongoDB only: MONGODB_OP_TIMEOUT_MS (default 5000). */
  mongodbOpTimeoutMs?: number;
  dbName: string;
  sqlitePath: string;
  /** MongoDB only: retired indexes dropped and undeclared ones kept at start-up (default: a process warning). */
  onIndexReport?: IndexReport;
}): Promise<Store> {
  if (options.mongodbUri) {
    const { mongodbUri: uri, mongodbOpTimeoutMs: opTimeoutMs, dbName, onIndexReport } = options;
    return openMongoStore({ uri, dbName, opTimeoutMs, onIndexReport });
  }
  return openSqliteStore({ path: options.sqlitePath });
}
export { Retention, type RetentionOptions } from './retention';
export { TxFlowError } from './tx-flow';
