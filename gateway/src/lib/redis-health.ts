import type Redis from 'ioredis';
import { connectionProblem, type ConnectionProblem } from '@svc/kit';

/**
 * What /readyz says about the gateway's Redis clients: nothing while each is connected; otherwise why the last
 * attempt failed. ioredis keeps reconnecting by itself; the clients' `error` events carry the cause (WRONGPASS,
 * NOPERM, a certificate not trusted, a refused connection).
 */
export class RedisHealth {
  private readonly failures = new Map<Redis, unknown>();

  constructor(private readonly clients: Redis[]) {
    for (const client of clients) {
      client.on('error', (err: unknown) => this.failures.set(client, err));
      client.on('ready', () => this.failures.delete(client));
    }
  }

  /** The problem of a client that is not connected and has failed since it last was, if any. */
  problem(): ConnectionProblem | null {
    for (const client of this.clients) {
      const failure = this.failures.get(client);
      if (client.status !== 'ready' && failure !== undefined) return connectionProblem('Redis', failure);
    }
    return null;
  }
}
