import { createClient, type ServiceClient } from '@svc/kit';
import { agentsV1, billingV1, chatV1, identityV1, projectsV1, regionsV1, webhooksV1 } from '@svc/proto';

/**
 * The backing services: gRPC definition and default port. The gateway makes one client per entry, finds each at
 * `<NAME>_ADDR` (default 127.0.0.1:<port>) and checks each in /readyz. Adding a service is one line here.
 */
export const SERVICES = {
  identity: { definition: identityV1.IdentityServiceService, port: 50051 },
  projects: { definition: projectsV1.ProjectsServiceService, port: 50052 },
  agents: { definition: agentsV1.AgentsServiceService, port: 50053 },
  chat: { definition: chatV1.ChatServiceService, port: 50054 },
  regions: { definition: regionsV1.RegionsServiceService, port: 50055 },
  billing: { definition: billingV1.BillingServiceService, port: 50056 },
  webhooks: { definition: webhooksV1.WebhooksServiceService, port: 50057 },
} as const;

export type ServiceName = keyof typeof SERVICES;
export type Clients = { [K in ServiceName]: ServiceClient<(typeof SERVICES)[K]['definition']> };

export function serviceAddresses(env: NodeJS.ProcessEnv): Record<ServiceName, string> {
  const out = {} as Record<ServiceName, string>;
  for (const [name, s] of Object.entries(SERVICES) as Array<[ServiceName, { port: number }]>)
    out[name] = env[`${name.toUpperCase()}_ADDR`] || `127.0.0.1:${s.port}`;
  return out;
}

export function createClients(addresses: Record<ServiceName, string>, deadlineMs: number): Clients {
  const out: Record<string, unknown> = {};
  for (const [name, s] of Object.entries(SERVICES) as Array<[ServiceName, { definition: object }]>)
    out[name] = createClient(s.definition, addresses[name], { deadlineMs });
  return out as Clients;
}

export function closeClients(clients: Clients): void {
  for (const c of Object.values(clients)) c.close();
}
