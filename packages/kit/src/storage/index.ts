export * from './types';
export { encodeCursor, decodeCursor, clampLimit } from './cursor';
export { openSqliteStore } from './sqlite';

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
  dbName: string;
  sqlitePath: string;
  /** MongoDB only: index replacements and undeclared indexes at start-up (default: a process warning). */
  onIndexReport?: IndexReport;
}): Promise<Store> {
  if (options.mongodbUri) return openMongoStore({ uri: options.mongodbUri, dbName: options.dbName, onIndexReport: options.onIndexReport });
  return openSqliteStore({ path: options.sqlitePath });
}
