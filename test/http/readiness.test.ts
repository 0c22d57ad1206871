import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  BUS_HEALTH,
  checkHealth,
  CONSUMERS_HEALTH,
  createClient,
  createLogger,
  JwtVerifier,
  openRuntime,
  serve,
  type RunningService,
} from '@svc/kit';
import { projectsV1 } from '@svc/proto';
import { buildApp } from '../../gateway/src/app';
import { loadGatewayConfig } from '../../gateway/src/config';

// A bus outage does not take a service out of traffic (its outbox keeps the writes): the service stays SERVING and
// reports the bus on its own health name; the gateway's /readyz names it (CONTRACT.md 1: 503 naming what is down).
jest.setTimeout(30_000);

let dir: string;
let service: RunningService;
let busDown = false;
let rt: Awaited<ReturnType<typeof openRuntime>>;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'svc-readiness-'));
  rt = await openRuntime({ name: 'projects', defaultPort: 0, collections: [], env: { DATA_DIR: dir, LOG_LEVEL: 'silent' } });
  const realPing = rt.bus.ping.bind(rt.bus);
  rt.bus.ping = () => (busDown ? Promise.reject(new Error('broker unreachable')) : realPing());
  service = await serve(rt, {
    verifier: new JwtVerifier({ issuer: 'x', audience: 'y', fetchJwks: async () => ({ keys: [] }) }),
    registrations: [],
    healthNames: ['projects.v1.ProjectsService'],
  });
});
afterAll(async () => {
  await service.stop();
  rmSync(dir, { recursive: true, force: true });
});

async function until(check: () => Promise<boolean>): Promise<void> {
  const deadline = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error('condition not met within 10 s');
    await new Promise((r) => setTimeout(r, 100));
  }
}

function gateway() {
  const client = createClient(projectsV1.ProjectsServiceService, `127.0.0.1:${service.port}`, { deadlineMs: 1000 });
  const config = loadGatewayConfig({ LOG_LEVEL: 'silent' });
  const app = buildApp({
    config,
    clients: { projects: client } as never,
    resolver: null as never,
    verifier: new JwtVerifier({ issuer: 'x', audience: 'y', fetchJwks: async () => ({ keys: [] }) }),
    limiter: null as never,
    caches: null as never,
    logger: createLogger('gateway', 'silent'),
  });
  return { client, app };
}

it('keeps serving with its bus down, reports the bus apart, and /readyz names it', async () => {
  const { client, app } = gateway();
  try {
    expect(await checkHealth(client.grpcClient, BUS_HEALTH)).toBe(true);
    expect((await app.inject({ method: 'GET', url: '/readyz' })).json().data).toEqual({ status: 'ready', services: { projects: 'up' } });

    busDown = true;
    await until(async () => !(await checkHealth(client.grpcClient, BUS_HEALTH)));
    expect(await checkHealth(client.grpcClient)).toBe(true); // still in traffic
    expect(await checkHealth(client.grpcClient, 'projects.v1.ProjectsService')).toBe(true);
    await new Promise((r) => setTimeout(r, 1100)); // the gateway keeps a readiness answer for a second
    const res = await app.inject({ method: 'GET', url: '/readyz' });
    expect(res.statusCode).toBe(503);
    expect(res.json().error).toMatchObject({
      code: 'SERVICE_UNAVAILABLE',
      details: { down: ['projects bus'], services: { projects: 'bus_down' } },
    });

    busDown = false;
    await until(async () => checkHealth(client.grpcClient, BUS_HEALTH));
    await new Promise((r) => setTimeout(r, 1100));
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  } finally {
    await app.close();
    client.close();
  }
});

it("/readyz says not ready until the gateway holds identity's key set, and ready once it can fetch it", async () => {
  const client = createClient(projectsV1.ProjectsServiceService, `127.0.0.1:${service.port}`, { deadlineMs: 1000 });
  let identityUp = false;
  const app = buildApp({
    config: loadGatewayConfig({ LOG_LEVEL: 'silent' }),
    clients: { projects: client } as never,
    resolver: null as never,
    verifier: new JwtVerifier({
      issuer: 'x',
      audience: 'y',
      minRefreshMs: 10,
      fetchJwks: async () => {
        if (!identityUp) throw new Error('identity unreachable');
        return { keys: [] };
      },
    }),
    limiter: null as never,
    caches: null as never,
    logger: createLogger('gateway', 'silent'),
  });
  try {
    const res = await app.inject({ method: 'GET', url: '/readyz' });
    expect(res.statusCode).toBe(503);
    expect(res.json().error.details.down).toEqual(['identity keys']);
    identityUp = true;
    await new Promise((r) => setTimeout(r, 1100)); // the gateway keeps a readiness answer for a second
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  } finally {
    await app.close();
    client.close();
  }
});

it('reports a consumer stalled on an unavailable dependency apart, while it serves, and /readyz names it', async () => {
  const { client, app } = gateway();
  // The handler's store is down: the message is retried without limit (not dead-lettered) and the consumer is stalled.
  let storeDown = true;
  const handled: string[] = [];
  const subscription = await rt.bus.subscribe({
    group: 'readiness-test',
    topics: ['readiness.events'],
    handler: async (m) => {
      if (storeDown) throw new Error('connect ECONNREFUSED 127.0.0.1:27017');
      handled.push(m.id);
    },
  });
  try {
    expect(await checkHealth(client.grpcClient, CONSUMERS_HEALTH)).toBe(true);
    await rt.bus.publish([{ id: 'evt-1', topic: 'readiness.events', key: 't1', value: new Uint8Array(0), headers: {} }]);
    await until(async () => !(await checkHealth(client.grpcClient, CONSUMERS_HEALTH)));
    expect(await checkHealth(client.grpcClient)).toBe(true); // still in traffic
    expect(await checkHealth(client.grpcClient, BUS_HEALTH)).toBe(true); // the bus itself is fine
    await new Promise((r) => setTimeout(r, 1100)); // the gateway keeps a readiness answer for a second
    const res = await app.inject({ method: 'GET', url: '/readyz' });
    expect(res.statusCode).toBe(503);
    expect(res.json().error).toMatchObject({
      code: 'SERVICE_UNAVAILABLE',
      details: { down: ['projects consumers'], services: { projects: 'consumer_stalled' } },
    });

    storeDown = false;
    await until(async () => handled.includes('evt-1'));
    await new Promise((r) => setTimeout(r, 1100)); // the service measures its health at most once a second
    await until(async () => checkHealth(client.grpcClient, CONSUMERS_HEALTH));
    await new Promise((r) => setTimeout(r, 1100));
    expect((await app.inject({ method: 'GET', url: '/readyz' })).statusCode).toBe(200);
  } finally {
    await subscription.stop();
    await app.close();
    client.close();
  }
});
