/**
 * What the deployment must allow, read from the code rather than restated: which processes exist, which peers each
 * one calls (its `<PEER>_ADDR` settings), which use Redis, MongoDB and Kafka, which call addresses outside the
 * cluster, and how long each takes to stop. A new peer call in a config file changes these facts, and the deployment
 * tests then fail until the manifests, the network policies and compose follow.
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';

export const root = path.resolve(__dirname, '../..');

const read = (rel: string): string => readFileSync(path.join(root, rel), 'utf8');

/** The process's own TypeScript sources (no tests, no browser assets), recursively. */
function sourcesOf(dir: string): string[] {
  const out: string[] = [];
  for (const entry of readdirSync(path.join(root, dir))) {
    const rel = path.join(dir, entry);
    if (statSync(path.join(root, rel)).isDirectory()) out.push(...sourcesOf(rel));
    else if (entry.endsWith('.ts') && !entry.endsWith('.test.ts')) out.push(rel);
  }
  return out;
}
const sourceText = (dir: string): string => sourcesOf(dir).map(read).join('\n');

/** `field('PROJECTS_ADDR', ...)` -> projects. */
const addrFields = (text: string): string[] => [...text.matchAll(/field\('([A-Z][A-Z0-9]*)_ADDR'/g)].map((m) => m[1].toLowerCase());

export interface ProcessFacts {
  name: string;
  /** The directory whose src/ holds the process: gateway, services/<name>. */
  dir: string;
  /** Processes it calls over gRPC, from its address settings (itself excluded). */
  calls: string[];
  /** Opens a store and a bus (openRuntime): needs MONGODB_URI, KAFKA_BROKERS and SVC_MASTER_KEY. */
  storeAndBus: boolean;
  /** Reads config.redisUrl somewhere. */
  redis: boolean;
  /** Calls addresses outside the cluster (through the egress guard, fetch, or a provider SDK). */
  internet: boolean;
}

/** The gateway's backing services and their ports, from gateway/src/clients.ts (one client per entry). */
export function servicePorts(): Record<string, number> {
  const text = read('gateway/src/clients.ts');
  if (!text.includes('_ADDR`')) throw new Error('gateway/src/clients.ts no longer finds services by <NAME>_ADDR');
  const out: Record<string, number> = {};
  for (const m of text.matchAll(/^\s+(\w+): \{ definition: [\w.]+, port: (\d+) \}/gm)) out[m[1]] = Number(m[2]);
  if (Object.keys(out).length === 0) throw new Error('no services found in gateway/src/clients.ts');
  return out;
}

/** Markers of calls leaving the cluster: the egress guard (tenant-chosen addresses), global fetch, provider SDKs. */
const INTERNET = [/egressPolicyFrom\(/, /(?<![.\w])fetch\(/, /from 'stripe'/, /new S3Client\(/, /BlobServiceClient\(/];

export function processFacts(): ProcessFacts[] {
  const ports = servicePorts();
  // Every process loads the common settings (services through openRuntime, the gateway by spreading them).
  const common = addrFields(read('packages/kit/src/config.ts'));
  const gatewayText = sourceText('gateway/src');
  if (!gatewayText.includes('...commonConfig')) throw new Error('the gateway no longer loads commonConfig');
  const services = readdirSync(path.join(root, 'services')).filter((n) => existsSync(path.join(root, 'services', n, 'src/main.ts')));
  const facts: ProcessFacts[] = [
    {
      name: 'gateway',
      dir: 'gateway',
      calls: [...new Set([...Object.keys(ports), ...common, ...addrFields(gatewayText)])].sort(),
      storeAndBus: /openRuntime\(|openStore\(|openBus\(/.test(gatewayText),
      redis: /\.redisUrl\b/.test(gatewayText),
      internet: INTERNET.some((r) => r.test(gatewayText)),
    },
  ];
  for (const name of services.sort()) {
    const text = sourceText(`services/${name}/src`);
    if (!text.includes('openRuntime(')) throw new Error(`services/${name} does not start through openRuntime`);
    facts.push({
      name,
      dir: `services/${name}`,
      calls: [...new Set([...common, ...addrFields(text)])].filter((p) => p !== name).sort(),
      storeAndBus: true,
      redis: /\.redisUrl\b/.test(text),
      internet: INTERNET.some((r) => r.test(text)),
    });
  }
  return facts;
}

/** A number in the code, found by a pattern whose first group is it; throws when the code moved. */
function numberIn(rel: string, pattern: RegExp): number {
  const m = read(rel).match(pattern);
  if (!m) throw new Error(`${pattern} not found in ${rel}: update test/deploy/code-facts.ts`);
  return Number(m[1]);
}

/**
 * Milliseconds a process may spend stopping after SIGTERM before it exits on its own: the gRPC server's grace,
 * what the service drains on top, and an allowance for closing the bus and store (Kafka and MongoDB disconnects).
 */
export function stopBudgetMs(name: string): number {
  // Closing connections, then the spans flushed to the collector (bounded) before the process exits.
  const closeAllowance = 10_000 + numberIn('packages/kit/src/telemetry-flush.ts', /FLUSH_TIMEOUT_MS = (\d+)/);
  if (name === 'gateway') return numberIn('packages/kit/src/config.ts', /GRPC_DEADLINE_MS', 'int', \{ default: '(\d+)'/) + closeAllowance;
  const grpcGrace = numberIn('packages/kit/src/grpc/server.ts', /async stop\(graceMs = (\d+)\)/);
  const extra: Record<string, () => number> = {
    chat: () => numberIn('services/chat/src/config.ts', /CHAT_DRAIN_MS', 'int', \{ default: '(\d+)'/),
    webhooks: () => numberIn('services/webhooks/src/worker.ts', /async stop\(graceMs = (\d+)\)/),
  };
  return grpcGrace + (extra[name]?.() ?? 0) + closeAllowance;
}
