import Fastify, { type RouteOptions } from 'fastify';
import { declaringDeps } from '../deps';
import { registerRoutes } from '../routes';
import { validatorCompiler } from './validation';

/**
 * Validators are compiled by a route's first request (validation.ts): a schema Ajv cannot compile would then fail on
 * that request, not at start. This compiles every route's, as their first requests will.
 */
it("compiles every route's body, query and path schema, and the compiled validators refuse what they should", async () => {
  const declaring = declaringDeps('validation-test');
  const app = Fastify();
  const routes: RouteOptions[] = [];
  app.addHook('onRoute', (r) => void routes.push(r));
  registerRoutes(app, declaring.deps);
  await app.ready();
  await app.close();
  declaring.close();

  let compiled = 0;
  for (const route of routes)
    for (const httpPart of ['body', 'querystring', 'params'] as const) {
      const schema = route.schema?.[httpPart];
      if (!schema) continue;
      const validate = validatorCompiler({ schema, method: String(route.method), url: route.url, httpPart }) as (d: unknown) => boolean;
      // An object schema refuses a string; compiling happens here, on this first call.
      expect({ route: route.url, httpPart, ok: validate('not an object') }).toEqual({ route: route.url, httpPart, ok: false });
      compiled++;
    }
  expect(compiled).toBeGreaterThan(100);
});
