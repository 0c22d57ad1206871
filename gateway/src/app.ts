import { randomUUID } from 'node:crypto';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance } from 'fastify';
import { AppError, type Logger } from '@svc/kit';
import type { GatewayConfig } from './config';
import type { Clients } from './clients';
import type { CredentialResolver } from './lib/credentials';
import { sendError } from './lib/envelope';
import { parseJsonBody } from './lib/json-body';
import type { RateLimiter } from './lib/rate-limiter';
import { routesOf, type RouteSpec } from './lib/route';
import { fieldErrors, validatorCompiler } from './lib/validation';
import { registerAuthentication } from './plugins/authenticate';
import { registerRoutes } from './routes';

export interface GatewayDeps {
  config: GatewayConfig;
  clients: Clients;
  resolver: CredentialResolver;
  limiter: RateLimiter;
  logger: Logger;
}

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;
export const BODY_LIMIT = 1024 * 1024;

/** The whole gateway as a Fastify instance: testable with real listeners, started by server.ts. */
export function buildApp(deps: GatewayDeps): FastifyInstance {
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    // Fastify's per-request lines are off; errors are logged by the error handler with the request id. No pino
    // child logger per request either: it costs on every request and only errors are logged.
    logController: new LogController({ disableRequestLogging: true }),
    childLoggerFactory: (logger) => logger,
    bodyLimit: BODY_LIMIT,
    trustProxy: deps.config.trustProxy?.length ? deps.config.trustProxy : false,
    genReqId: (req) => {
      const incoming = req.headers['x-request-id'];
      return typeof incoming === 'string' && REQUEST_ID.test(incoming) ? incoming : randomUUID();
    },
    routerOptions: { ignoreTrailingSlash: true, maxParamLength: 200 },
    return503OnClosing: true,
  });

  app.setValidatorCompiler(validatorCompiler);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'string' }, (_req, body, done) => {
    try {
      done(null, parseJsonBody(body as string));
    } catch (err) {
      done(err as Error, undefined);
    }
  });

  // Set first thing (not in onSend): every answer carries it, including 404s and errors, at no extra hook cost.
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('X-Request-Id', request.id);
    done();
  });

  registerAuthentication(app, { resolver: deps.resolver, limiter: deps.limiter, publicOrigin: () => new URL(deps.config.publicUrl).origin });
  registerRoutes(app, deps);

  app.setErrorHandler((err: FastifyError | AppError, request, reply) => sendError(request, reply, toAppError(err, request.log, request.id)));

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0];
    const methods = allowedMethods(routesOf(app), path);
    if (methods.length) {
      reply.header('Allow', methods.join(', '));
      return sendError(request, reply, new AppError('METHOD_NOT_ALLOWED', `Method ${request.method} is not allowed here`, { method: request.method, allowed: methods }));
    }
    return sendError(request, reply, new AppError('RESOURCE_NOT_FOUND', 'No such route', { path: path.slice(0, 300) }));
  });

  return app;
}

/** Framework and transport errors -> AppError. Unknown errors are logged and hidden behind a 500. */
function toAppError(err: FastifyError | AppError, log: { error: (o: object, m: string) => void }, requestId: string): AppError {
  if (err instanceof AppError) return err;
  if (err.validation) {
    return new AppError('VALIDATION_ERROR', 'Invalid request parameters', { fields: fieldErrors(err.validation as never, err.validationContext ?? 'body') });
  }
  switch (err.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new AppError('PAYLOAD_TOO_LARGE', `Request body is larger than ${BODY_LIMIT} bytes`, { limit: BODY_LIMIT });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new AppError('UNSUPPORTED_MEDIA_TYPE', 'Request bodies must be application/json', { reason: 'unsupported_media_type' });
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new AppError('VALIDATION_ERROR', 'Request body is empty', { reason: 'empty_body' });
  }
  if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
    return new AppError('VALIDATION_ERROR', 'Malformed request', { reason: 'malformed_request' });
  }
  log.error({ err, reqId: requestId }, 'unhandled error');
  return new AppError('INTERNAL_ERROR', 'Internal server error');
}

function allowedMethods(registry: RouteSpec[], path: string): string[] {
  const methods = new Set<string>();
  for (const r of registry) {
    const pattern = new RegExp('^' + r.url.replace(/:[A-Za-z_]+/g, '[^/]+').replace(/\./g, '\\.') + '/?$');
    if (pattern.test(path)) methods.add(r.method);
  }
  return [...methods];
}
