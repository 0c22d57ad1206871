/**
 * A loopback TCP peer speaking just enough of MongoDB's wire protocol for the driver to connect and run commands:
 * the handshake (OP_QUERY or OP_MSG `hello`) and OP_MSG commands, each answered with a plausible empty result (no
 * data is kept). It records every command the driver sends, and can stop answering them while still answering the
 * driver's monitoring `hello`s: a primary whose storage hangs, which the driver's monitor still sees as healthy.
 * MongoDB itself cannot be installed on these machines; this is for what a client does, not what a server does.
 */
import { createServer, type Server, type Socket } from 'node:net';
import mongoose from 'mongoose';

const { BSON } = mongoose.mongo;
type Doc = Record<string, unknown>;

const OP_REPLY = 1;
const OP_QUERY = 2004;
const OP_MSG = 2013;
const HELLO = new Set(['hello', 'isMaster', 'ismaster']);

export interface FakeMongodCommand {
  name: string;
  db: string;
  body: Doc;
}

export interface FakeMongod {
  /** A direct connection to this peer, database `kit`. */
  uri: string;
  /** Every command but the handshake and monitoring `hello`s, in arrival order. */
  commands: FakeMongodCommand[];
  /** While true, commands get no answer at all (the `hello`s still do). */
  hang: boolean;
  /** An answer to use instead of the default one for a command name (an error document, say). */
  answer: Map<string, (command: FakeMongodCommand) => Doc>;
  /** The server goes away: its connections drop and new ones are refused. */
  down(): Promise<void>;
  close(): Promise<void>;
}

function emptyCursor(db: string, body: Doc, name: string): Doc {
  const collection = typeof body[name] === 'string' ? body[name] : 'x';
  return { cursor: { id: BSON.Long.fromNumber(0), ns: `${db}.${String(collection)}`, firstBatch: [] }, ok: 1 };
}

function defaultAnswer({ name, db, body }: FakeMongodCommand): Doc {
  switch (name) {
    case 'listIndexes':
      return {
        cursor: {
          id: BSON.Long.fromNumber(0),
          ns: `${db}.${String(body.listIndexes)}`,
          firstBatch: [{ v: 2, key: { _id: 1 }, name: '_id_' }],
        },
        ok: 1,
      };
    case 'find':
    case 'aggregate':
      return emptyCursor(db, body, name);
    case 'insert':
      return { n: Array.isArray(body.documents) ? body.documents.length : 1, ok: 1 };
    case 'update':
    case 'delete':
      return { n: 0, nModified: 0, ok: 1 };
    case 'findAndModify':
      return { lastErrorObject: { n: 0, updatedExisting: false }, value: null, ok: 1 };
    default:
      return { ok: 1 };
  }
}

export async function startFakeMongod(): Promise<FakeMongod> {
  const sockets = new Set<Socket>();
  let connectionId = 0;
  let port = 0;
  const hello = (id: number): Doc => ({
    helloOk: true,
    ismaster: true,
    isWritablePrimary: true,
    setName: 'rs0',
    hosts: [`127.0.0.1:${port}`],
    me: `127.0.0.1:${port}`,
    maxBsonObjectSize: 16 * 1024 * 1024,
    maxMessageSizeBytes: 48_000_000,
    maxWriteBatchSize: 100_000,
    localTime: new Date(),
    logicalSessionTimeoutMinutes: 30,
    connectionId: id,
    minWireVersion: 0,
    maxWireVersion: 21,
    ok: 1,
  });

  const fake: FakeMongod = {
    uri: '',
    commands: [],
    hang: false,
    answer: new Map(),
    down: async () => {
      if (!server.listening) return;
      const closed = new Promise((resolve) => server.close(resolve));
      for (const socket of sockets) socket.destroy();
      await closed;
    },
    close: () => fake.down(),
  };

  const header = (length: number, responseTo: number, opCode: number) => {
    const head = Buffer.alloc(16);
    head.writeInt32LE(length, 0);
    head.writeInt32LE(Math.floor(Math.random() * 2 ** 31), 4);
    head.writeInt32LE(responseTo, 8);
    head.writeInt32LE(opCode, 12);
    return head;
  };
  const reply = (socket: Socket, requestId: number, opCode: number, doc: Doc) => {
    const body = Buffer.from(BSON.serialize(doc));
    if (opCode === OP_QUERY) {
      const fields = Buffer.alloc(20); // responseFlags, cursorID (8), startingFrom, numberReturned
      fields.writeInt32LE(1, 16);
      socket.write(Buffer.concat([header(16 + 20 + body.length, requestId, OP_REPLY), fields, body]));
    } else {
      const flags = Buffer.alloc(5); // flagBits, then a kind-0 section
      socket.write(Buffer.concat([header(16 + 5 + body.length, requestId, OP_MSG), flags, body]));
    }
  };

  const handle = (socket: Socket, id: number, message: Buffer) => {
    const requestId = message.readInt32LE(4);
    const opCode = message.readInt32LE(12);
    let body: Doc;
    let db: string;
    if (opCode === OP_QUERY) {
      const nameEnd = message.indexOf(0, 20);
      db = message.toString('utf8', 20, nameEnd).split('.')[0];
      const at = nameEnd + 1 + 8; // numberToSkip, numberToReturn
      body = BSON.deserialize(message.subarray(at, at + message.readInt32LE(at)));
    } else if (opCode === OP_MSG) {
      let at = 20; // header, flagBits
      body = {};
      while (at < message.length) {
        const kind = message[at++];
        const size = message.readInt32LE(at);
        if (kind === 0) body = { ...BSON.deserialize(message.subarray(at, at + size)), ...body };
        else {
          // A document sequence: its identifier names the field the documents belong to.
          const idEnd = message.indexOf(0, at + 4);
          const field = message.toString('utf8', at + 4, idEnd);
          const docs: Doc[] = [];
          for (let d = idEnd + 1; d < at + size; d += message.readInt32LE(d))
            docs.push(BSON.deserialize(message.subarray(d, d + message.readInt32LE(d))));
          body[field] = docs;
        }
        at += size;
      }
      db = typeof body.$db === 'string' ? body.$db : 'admin';
    } else return; // nothing else is sent without compression, which this peer does not offer
    const name = Object.keys(body)[0] ?? '';
    if (HELLO.has(name)) return reply(socket, requestId, opCode, hello(id));
    const command = { name, db, body };
    fake.commands.push(command);
    if (fake.hang) return;
    reply(socket, requestId, opCode, (fake.answer.get(name) ?? defaultAnswer)(command));
  };

  const server: Server = createServer((socket) => {
    sockets.add(socket);
    const id = ++connectionId;
    let pending = Buffer.alloc(0);
    socket.on('data', (chunk) => {
      pending = Buffer.concat([pending, chunk]);
      while (pending.length >= 4 && pending.length >= pending.readInt32LE(0)) {
        const length = pending.readInt32LE(0);
        handle(socket, id, pending.subarray(0, length));
        pending = pending.subarray(length);
      }
    });
    socket.on('error', () => undefined);
    socket.on('close', () => sockets.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  port = (server.address() as { port: number }).port;
  fake.uri = `mongodb://127.0.0.1:${port}/kit?directConnection=true`;
  return fake;
}
