import { randomUUID } from 'node:crypto';
import mongoose from 'mongoose';
import { openMongoStore } from './mongo';
import { storeContract } from './store.contract';

// A test reads its peer's address directly: there is no service config here.

const uri = process.env.MONGODB_URI;
const dbNames: string[] = [];

// MongoDB cannot run on every machine (it is not installable on the CI/dev box), so this suite runs only when
// MONGODB_URI points at a server. Transactions need a replica set: a single-node one (`--replSet rs0`) will do.
const d = uri ? describe : describe.skip;

d('mongo store', () => {
  afterAll(async () => {
    if (!uri || dbNames.length === 0) return;
    const connection = await mongoose.createConnection(uri).asPromise();
    try {
      for (const name of dbNames) await connection.useDb(name).dropDatabase();
    } finally {
      await connection.close();
    }
  });

  storeContract('mongodb', async () => {
    const dbName = `kit_contract_${randomUUID().replace(/-/g, '')}`;
    dbNames.push(dbName);
    return openMongoStore({ uri: uri!, dbName });
  });
});
