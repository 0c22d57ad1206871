import Fastify, { type RouteOptions } from 'fastify';
import { declaringDeps } from '../deps';
import { routesOf } from '../lib/route';
import { registerRoutes } from '.';
import { PLATFORM_TOOLS } from './mcp';
import { PASSTHROUGH_PREFIX } from './passthrough';

/**
 * REQUIRE_VERIFIED_EMAIL guards the routes and MCP tools marked `modelCall` (lib/verified-email.ts): this finds the
 * ones whose code starts a model call and asserts each carries the marker, and that nothing else does. Starting a
 * model call means calling one of the RPCs that start model work (a chat reply, a /v1 call, embeddings, an agent run)
 * or checking the key's tokens per minute first, as every model call does (lib/key-usage.ts). Approving or rejecting
 * a waiting run continues a run already started: not a start. The pass-through forwards everything under its prefix
 * to the provider.
 */
const STARTS_MODEL_CALL = /\b(postMessage|startCall|embed|executeAgent|assertKeyTokens)\(/;

let routes: RouteOptions[];
let specs: ReturnType<typeof routesOf>;

beforeAll(async () => {
  const declaring = declaringDeps('model-calls-test');
  const app = Fastify();
  routes = [];
  app.addHook('onRoute', (r) => void routes.push(r));
  registerRoutes(app, declaring.deps);
  await app.ready();
  specs = routesOf(app);
  await app.close();
  declaring.close();
});

const name = (r: { method: string | string[]; url: string }) => `${([] as string[]).concat(r.method).join(',')} ${r.url}`;

it('every route that starts a model call is marked modelCall, and no other route is', () => {
  const starting = specs.filter((s) => STARTS_MODEL_CALL.test(s.handler.toString())).map(name);
  const marked = routes.filter((r) => r.config?.modelCall && !r.url.startsWith(PASSTHROUGH_PREFIX)).map(name);
  expect(marked.sort()).toEqual(starting.sort());
  // Not vacuous: the scan finds the model calls there are today (a new one joins this list with its marker).
  expect(starting.sort()).toEqual([
    'POST /api/v1/agents/:id/execute',
    'POST /api/v1/chat/sessions/:id/messages',
    'POST /v1/chat/completions',
    'POST /v1/embeddings',
    'POST /v1/responses',
  ]);
});

it('every pass-through route is marked; /mcp is not (its model-calling tools are, one by one)', () => {
  const passthrough = routes.filter((r) => r.url.startsWith(PASSTHROUGH_PREFIX));
  expect(passthrough.length).toBeGreaterThanOrEqual(2);
  for (const r of passthrough) expect([name(r), r.config?.modelCall]).toEqual([name(r), true]);
  const mcp = routes.filter((r) => r.url === '/mcp');
  expect(mcp.map((r) => r.method).sort()).toEqual(['DELETE', 'GET', 'HEAD', 'POST']);
  for (const r of mcp) expect(r.config?.modelCall).toBeFalsy();
});

it('every MCP tool that starts a model call is marked modelCall, and no other tool is', () => {
  const starting = PLATFORM_TOOLS.filter((t) => STARTS_MODEL_CALL.test(t.run.toString())).map((t) => t.name);
  expect(PLATFORM_TOOLS.filter((t) => t.modelCall).map((t) => t.name)).toEqual(starting);
  expect(starting).toEqual(['run_agent']);
});
