export * from './types';
export { encodeCursor, decodeCursor, clampLimit } from './cursor';
export { openSqliteStore } from './sqlite';
export { openMongoStore } from './mongo';

import { openMongoStore } from './mongo';
import { openSqliteStore } from './sqlite';
import type { Store } from './types';

/** MongoDB when a URI is configured (distributed mode), else the service's SQLite file (embedded mode). */
export async function openStore(options: { mongodbUri?: string; dbName: string; sqlitePath: string }): Promise<Store> {
  if (options.mongodbUri) return openMongoStore({ uri: options.mongodbUri, dbName: options.dbName });
  return openSqliteStore({ path: options.sqlitePath });
}
