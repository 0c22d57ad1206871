import { checkHealth } from '@svc/kit';
import type { Clients } from '../clients';

export interface ServiceHealth {
  name: string;
  status: 'up' | 'down';
  /** Round trip of a gRPC health check from this gateway, measured. */
  latencyMs: number;
  checkedAt: string;
}

/**
 * Each backing service's health and latency as this gateway sees it: a real gRPC health check per service, timed,
 * run at once for all and kept for `ttlMs` so that a busy debug endpoint does not multiply probes (one round in
 * flight at a time, shared by every caller).
 */
export function serviceHealthProbe(clients: Clients, ttlMs = 1000, deadlineMs = 1000) {
  let last: { at: number; services: ServiceHealth[] } | null = null;
  let inFlight: Promise<ServiceHealth[]> | null = null;

  async function probe(): Promise<ServiceHealth[]> {
    return Promise.all(
      Object.entries(clients).map(async ([name, client]) => {
        const started = performance.now();
        const up = await checkHealth(client.grpcClient, '', deadlineMs);
        const latencyMs = Math.round((performance.now() - started) * 100) / 100;
        return { name, status: up ? 'up' : 'down', latencyMs, checkedAt: new Date().toISOString() } satisfies ServiceHealth;
      }),
    );
  }

  return async (): Promise<ServiceHealth[]> => {
    if (last && Date.now() - last.at < ttlMs) return last.services;
    inFlight ??= probe().then(
      (services) => {
        last = { at: Date.now(), services };
        inFlight = null;
        return services;
      },
      (err: unknown) => {
        inFlight = null;
        throw err;
      },
    );
    return inFlight;
  };
}
