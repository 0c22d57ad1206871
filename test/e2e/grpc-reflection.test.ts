/**
 * gRPC server reflection on every service (docs/runbooks/grpc.md): a reflection client, speaking the protocol grpcurl
 * speaks, lists each service's server and reads every method from the reflected descriptors alone, and calls a
 * service through a client built from them. The public gateway does not expose it.
 */
import { agentsV1, billingV1, chatV1, identityV1, projectsV1, regionsV1, webhooksV1 } from '@svc/proto';
import { startStack, type Stack } from '../helpers/stack';
import { ReflectionClient } from '../helpers/reflection';

/** What each service's server hosts, as the generated definitions (the code that serves) name it. */
const HOSTED: Record<string, object> = {
  identity: identityV1.IdentityServiceService,
  projects: projectsV1.ProjectsServiceService,
  agents: agentsV1.AgentsServiceService,
  webhooks: webhooksV1.WebhooksServiceService,
  chat: chatV1.ChatServiceService,
  regions: regionsV1.RegionsServiceService,
  billing: billingV1.BillingServiceService,
};
const pathsOf = (definition: object) => Object.values(definition as Record<string, { path: string }>).map((m) => m.path.split('/'));

let stack: Stack;
const clients: ReflectionClient[] = [];
const reflect = (address: string) => {
  const c = new ReflectionClient(address);
  clients.push(c);
  return c;
};

beforeAll(async () => {
  stack = await startStack();
}, 60_000);
afterAll(async () => {
  for (const c of clients) c.close();
  await stack?.stop();
});

describe('gRPC server reflection', () => {
  it('covers every service of the stack', () => {
    expect(Object.keys(stack.services).sort()).toEqual(Object.keys(HOSTED).sort());
  });

  it.each(Object.keys(HOSTED))('%s lists its service and the health service, and every method from descriptors', async (name) => {
    const client = reflect(`127.0.0.1:${stack.services[name].port}`);
    const service = pathsOf(HOSTED[name])[0][1];
    expect(await client.listServices()).toEqual(['grpc.health.v1.Health', service].sort());
    const expected = pathsOf(HOSTED[name])
      .map((p) => p[2])
      .sort();
    expect(expected.length).toBeGreaterThan(3);
    expect(await client.methodsOf(service)).toEqual(expected);
    expect(await client.methodsOf('grpc.health.v1.Health')).toEqual(['Check', 'List', 'Watch']);
  });

  it('is enough to call a service: a client built from reflected descriptors only', async () => {
    const client = reflect(`127.0.0.1:${stack.services.identity.port}`);
    const identity = await client.clientFor('identity.v1.IdentityService');
    const jwks = await new Promise<any>((resolve, reject) =>
      identity.GetJwks({}, (err: Error | null, res: unknown) => (err ? reject(err) : resolve(res))),
    );
    identity.close();
    expect(JSON.parse(jwks.jwks_json).keys.length).toBeGreaterThan(0);
    const health = await client.clientFor('grpc.health.v1.Health');
    const status = await new Promise<any>((resolve, reject) =>
      health.Check({ service: '' }, (err: Error | null, res: unknown) => (err ? reject(err) : resolve(res))),
    );
    health.close();
    expect(status.status).toBe('SERVING');
  });

  it('is not on the public gateway: no gRPC there, and the reflection path is an ordinary 404', async () => {
    const gateway = reflect(new URL(stack.url).host);
    await expect(gateway.listServices()).rejects.toThrow();
    const res = await fetch(`${stack.url}/grpc.reflection.v1.ServerReflection/ServerReflectionInfo`, {
      method: 'POST',
      headers: { 'content-type': 'application/grpc' },
      body: new Uint8Array([0, 0, 0, 0, 0]),
    });
    expect(res.status).toBe(404);
    expect(res.headers.get('content-type')).toMatch(/^application\/json/);
  });
});
