/**
 * Several services in one process, for the embedded default (`npm start`): each keeps its own gRPC server on its own
 * port, its own store file and its own bus consumers, and they call each other over real gRPC on loopback exactly
 * as separate pods do. Only the process is shared, which saves a Node runtime per service (memory, start-up,
 * timers). `node dist/services.js identity projects ...` (no names: all of them). docs/decisions.md (41) has the
 * figures behind it; deploy/ and `SVC_LAYOUT=per-service` keep one process per service.
 */
import '@svc/kit/telemetry';
import { runMain, serveMetrics, type RunningService } from '@svc/kit';
import { startIdentity } from '@svc/identity';
import { startProjects } from '@svc/projects';
import { startAgents } from '@svc/agents';
import { startChat } from '@svc/chat';
import { startRegions } from '@svc/regions';
import { startBilling } from '@svc/billing';
import { startWebhooks } from '@svc/webhooks';

const STARTERS: Record<string, (env: NodeJS.ProcessEnv) => Promise<RunningService>> = {
  identity: startIdentity,
  projects: startProjects,
  agents: startAgents,
  chat: startChat,
  regions: startRegions,
  billing: startBilling,
  webhooks: startWebhooks,
};

const names = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(STARTERS);
for (const name of names) if (!STARTERS[name]) throw new Error(`unknown service ${name}; known: ${Object.keys(STARTERS).join(', ')}`);

runMain(`services(${names.join(',')})`, async () => {
  // One metrics listener for the process (the registry is the process's), not one per service on the same port.
  const { METRICS_PORT: metricsPort, ...env } = process.env;
  const running = await Promise.all(names.map((name) => STARTERS[name](env)));
  const exporter = metricsPort === undefined ? null : await serveMetrics(Number(metricsPort), env.METRICS_HOST ?? '127.0.0.1');
  return {
    port: running[0].port,
    metricsPort: exporter?.port,
    failed: Promise.race(running.flatMap((svc) => (svc.failed ? [svc.failed] : []))),
    stop: async () => {
      exporter?.server.close();
      await Promise.all(running.map((svc) => svc.stop()));
    },
  };
});
