import type { Redis, RedisOptions } from 'ioredis';
import { redisTls } from './config';

/**
 * A Redis client for REDIS_URL (TLS with rediss://, an ACL user in the URL, REDIS_TLS_CA_FILE's CA). ioredis is
 * required here, when a client is made: a process without REDIS_URL never loads it.
 *
 * ioredis listens for a connection's `error` only once (its connector and its connect handler each use `once`), so a
 * socket that fails twice, as a TLS handshake refused by certificate does (the verification error, then the server's
 * alert), threw the second as an uncaught exception: a gateway given the wrong CA crashed instead of saying it is not
 * ready. Every connection it opens keeps a listener here; the first error still reaches ioredis, which reconnects.
 */
export function createRedisClient(config: { redisUrl: string; redisTlsCaFile?: string }, options: RedisOptions = {}): Redis {
  /* eslint-disable @typescript-eslint/no-require-imports -- deliberate lazy load */
  const { Redis: Client } = require('ioredis') as typeof import('ioredis');
  const { default: StandaloneConnector } = require('ioredis/built/connectors/StandaloneConnector') as {
    default: new (options: unknown) => { connect(onError: unknown): Promise<NodeJS.EventEmitter> };
  };
  /* eslint-enable @typescript-eslint/no-require-imports */
  class GuardedConnector extends StandaloneConnector {
    override async connect(onError: unknown) {
      const stream = await super.connect(onError);
      stream.on('error', () => undefined);
      return stream;
    }
  }
  return new Client(config.redisUrl, { ...redisTls(config), ...options, Connector: GuardedConnector as never });
}
