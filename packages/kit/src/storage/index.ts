export * from './types';
export { encodeCursor, decodeCursor, clampLimit } from './cursor';
export { openSqliteStore } from './sqlite';

import { openSqliteStore } from './sqlite';
import type { Store } from './types';

/** Opens MongoDB; mongoose is loaded only here, so processes that never use it (the gateway) never pay for it. */
export async function openMongoStore(options: { uri: string; dbName?: string }): Promise<Store> {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
  const mongo = require('./mongo') as typeof import('./mongo');
  return mongo.openMongoStore(options);
}

/** MongoDB when a URI is configured (distributed mode), else the service's SQLite file (embedded mode). */
export async function openStore(options: { mongodbUri?: string; dbName: string; sqlitePath: string }): Promise<Store> {
  if (options.mongodbUri) return openMongoStore({ uri: options.mongodbUri, dbName: options.dbName });
  return openSqliteStore({ path: options.sqlitePath });
}
