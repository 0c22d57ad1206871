import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startIdentity } from '@svc/identity';
import { startProjects } from '@svc/projects';
import { startAgents } from '@svc/agents';
import { startWebhooks, type WebhooksOptions } from '@svc/webhooks';
import { startChat } from '@svc/chat';
import { startRegions } from '@svc/regions';
import { startBilling } from '@svc/billing';
import { startGateway, type RunningGateway } from '@svc/gateway';
import { openBus, type EventBus, type RunningService } from '@svc/kit';
import { testKafkaBrokers } from '../kafka/env';
import { TEST_SYSTEM_ENV } from './system-env';

export interface Stack {
  url: string;
  dataDir: string;
  identity: RunningService;
  /** Every service, by name (identity included). */
  services: Record<string, RunningService>;
  gateways: RunningGateway[];
  /** The first gateway. */
  gateway: RunningGateway;
  env: NodeJS.ProcessEnv;
  stop(): Promise<void>;
}

export interface StackOptions {
  /** Extra settings for every process (RATE_LIMIT_MAX, REDIS_URL, ...). */
  env?: Record<string, string>;
  /** Gateway instances sharing the same services (default 1). */
  gateways?: number;
  /** The webhooks service's injected parts (the event log's clock). */
  webhooks?: WebhooksOptions;
}

/**
 * The suites' second pass (jest project `http-on-kafka`, TEST_BUS=kafka) runs every stack on the real Kafka broker
 * of the test run, each in its own namespace of topics and consumer groups.
 */
export function kafkaBusSettings(): Record<string, string> {
  if (process.env.TEST_BUS !== 'kafka') return {};
  return { KAFKA_BROKERS: testKafkaBrokers().join(','), KAFKA_NAMESPACE: `t${randomUUID().replaceAll('-', '')}` };
}

/** A client of the stack's own event bus (the embedded log under its data directory, or its Kafka namespace). */
export function stackBus(stack: Pick<Stack, 'dataDir' | 'env'>, clientId: string): EventBus {
  return openBus({
    clientId,
    embeddedPath: `${stack.dataDir}/bus.db`,
    kafkaBrokers: stack.env.KAFKA_BROKERS ? stack.env.KAFKA_BROKERS.split(',') : undefined,
    kafkaNamespace: stack.env.KAFKA_NAMESPACE,
  });
}

/**
 * The real system in this process: identity as a gRPC server on a loopback port, gateways as Fastify servers
 * on loopback ports, an embedded store and bus in a fresh temp directory. Requests go over real HTTP and gRPC.
 */
export async function startStack(options: StackOptions = {}): Promise<Stack> {
  const dataDir = mkdtempSync(join(tmpdir(), 'svc-test-'));
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    NODE_ENV: 'test',
    LOG_LEVEL: process.env.TEST_LOG_LEVEL ?? 'silent',
    DATA_DIR: dataDir,
    IDENTITY_PORT: '0',
    PROJECTS_PORT: '0',
    AGENTS_PORT: '0',
    WEBHOOKS_PORT: '0',
    CHAT_PORT: '0',
    REGIONS_PORT: '0',
    BILLING_PORT: '0',
    // Every call on the socket: the gateway shares this process with the services here, not in a deployed system.
    GRPC_IN_PROCESS: 'false',
    ...TEST_SYSTEM_ENV,
    ...kafkaBusSettings(),
    ...options.env,
  };
  // Identity first: the others fetch its JWKS.
  const identity = await startIdentity(env);
  env.IDENTITY_ADDR = `127.0.0.1:${identity.port}`;
  // Billing before agents and chat: they ask it for balances.
  const billing = await startBilling(env);
  env.BILLING_ADDR = `127.0.0.1:${billing.port}`;
  const services: Record<string, RunningService> = {
    identity,
    billing,
    projects: await startProjects(env),
    webhooks: await startWebhooks(env, options.webhooks),
  };
  env.PROJECTS_ADDR = `127.0.0.1:${services.projects.port}`;
  services.agents = await startAgents(env);
  env.AGENTS_ADDR = `127.0.0.1:${services.agents.port}`;
  services.chat = await startChat(env);
  services.regions = await startRegions(env);
  const gwEnv: NodeJS.ProcessEnv = { ...env, PORT: '0' };
  for (const [name, svc] of Object.entries(services)) gwEnv[`${name.toUpperCase()}_ADDR`] = `127.0.0.1:${svc.port}`;
  const gateways: RunningGateway[] = [];
  for (let i = 0; i < (options.gateways ?? 1); i++) gateways.push(await startGateway({ ...gwEnv, INSTANCE_ID: `gw-${i}` }));
  return {
    url: gateways[0].url,
    dataDir,
    identity,
    services,
    gateways,
    gateway: gateways[0],
    env: gwEnv,
    async stop() {
      for (const g of gateways) await g.stop();
      for (const svc of Object.values(services).reverse()) await svc.stop();
      rmSync(dataDir, { recursive: true, force: true });
    },
  };
}
