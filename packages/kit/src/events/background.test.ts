import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { projectsV1 } from '@svc/proto';
import { checkHealth, createClient } from '../grpc/client';
import { JwtVerifier } from '../jwt';
import { reservablePort } from '../ports';
import { BUS_HEALTH, openRuntime, serve } from '../service';
import { message, unique } from './bus.contract';
import type { ReceivedMessage } from './types';
import { startKafkaBroker, type KafkaBroker } from '../../../../test/kafka/broker';

// A service with consumers starts while its broker is down: it serves (Kubernetes' probe of the whole server
// answers at once), reports its bus NOT_SERVING until its consumers run, and consumes once the broker is up.
jest.setTimeout(90_000);

let dir: string;
let broker: KafkaBroker | null = null;

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'svc-bg-subscribe-'));
});
afterAll(async () => {
  await broker?.destroy();
  rmSync(dir, { recursive: true, force: true });
});

const verifier = new JwtVerifier({ issuer: 'x', audience: 'y', fetchJwks: async () => ({ keys: [] }) });

async function until(check: () => Promise<boolean>, ms: number): Promise<void> {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`condition not met within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function runtimeOn(port: number, name: string) {
  return openRuntime({
    name: 'projects',
    defaultPort: 0,
    collections: [],
    env: { DATA_DIR: join(dir, name), LOG_LEVEL: 'silent', KAFKA_BROKERS: `127.0.0.1:${port}` },
  });
}

it('serves with the broker down, names the bus until subscribed, then consumes', async () => {
  const port = await reservablePort('127.0.0.1');
  const rt = await runtimeOn(port, 'a');
  const topic = unique('bg');
  const got: ReceivedMessage[] = [];
  const service = await serve(rt, {
    verifier,
    registrations: [],
    healthNames: ['projects.v1.ProjectsService'],
    subscriptions: [{ group: unique('g'), topics: [topic], handler: async (m) => void got.push(m) }],
  });
  const client = createClient(projectsV1.ProjectsServiceService, `127.0.0.1:${service.port}`, { deadlineMs: 1000 });
  try {
    // What Kubernetes probes answers within its 1 s timeout, though the broker does not answer at all.
    expect(await checkHealth(client.grpcClient, '', 1000)).toBe(true);
    expect(await checkHealth(client.grpcClient, 'projects.v1.ProjectsService', 1000)).toBe(true);
    expect(await checkHealth(client.grpcClient, BUS_HEALTH, 3000)).toBe(false);

    broker = await startKafkaBroker({ port });
    await until(() => checkHealth(client.grpcClient, BUS_HEALTH, 3000), 45_000);
    await rt.bus.publish([message(topic, 'k', 1)]);
    await until(async () => got.some((m) => m.id === `${topic}-1`), 20_000);
  } finally {
    client.close();
    await service.stop();
  }
});

it('stops promptly while its consumer is still waiting for an absent broker', async () => {
  const port = await reservablePort('127.0.0.1');
  const rt = await runtimeOn(port, 'b');
  const service = await serve(rt, {
    verifier,
    registrations: [],
    healthNames: [],
    subscriptions: [{ group: unique('g'), topics: [unique('never')], handler: async () => {} }],
  });
  await new Promise((r) => setTimeout(r, 1500)); // a subscribe attempt is in flight or waiting to retry
  const started = Date.now();
  await service.stop();
  // Inside the closing allowance a pod has after its gRPC drain (test/deploy/code-facts.ts: 10 s).
  expect(Date.now() - started).toBeLessThan(10_000);
});
