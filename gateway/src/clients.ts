import { createClient, type ServiceClient } from '@svc/kit';
import { identityV1 } from '@svc/proto';

/** One gRPC client per backing service. Add a service here and to `SERVICE_NAMES`. */
export interface Clients {
  identity: ServiceClient<typeof identityV1.IdentityServiceService>;
}

export const SERVICE_NAMES = ['identity'] as const;

export function createClients(addresses: Record<(typeof SERVICE_NAMES)[number], string>, deadlineMs: number): Clients {
  return {
    identity: createClient(identityV1.IdentityServiceService, addresses.identity, { deadlineMs }),
  };
}

export function closeClients(clients: Clients): void {
  for (const c of Object.values(clients)) c.close();
}
