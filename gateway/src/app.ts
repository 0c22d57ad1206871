import { randomUUID } from 'node:crypto';
import type { Duplex } from 'node:stream';
import Fastify, { LogController, type FastifyBaseLogger, type FastifyError, type FastifyInstance } from 'fastify';
import { AppError, metrics } from '@svc/kit';
import { sendError } from './lib/envelope';
import { decodeUtf8, parseJsonBody } from './lib/json-body';
import { validatorCompiler } from './lib/validation';
import { BODY_LIMIT, toAppError } from './lib/app-error';
import { registerServerErrorLog } from './lib/error-log';
import { drainRefusedBody } from './lib/refused-body';
import { securityHeaders } from './lib/security-headers';
import { registerAccessLog } from './plugins/access-log';
import { registerAuthentication } from './plugins/authenticate';
import { registerVerifiedEmailGate } from './plugins/verified-email';
import { registerIdempotency } from './plugins/idempotency';
import { registerDocs } from './docs';
import { registerPages } from './pages';
import { registerRoutes } from './routes';
import type { GatewayDeps } from './deps';
import { closeSilentConnections } from './lib/silent-connections';

export type { GatewayDeps };

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/;

/**
 * Helmet's headers, set to fit a JSON API: nothing to sniff, frame, refer or load (pages and /docs send
 * their own CSP), resources for this origin only. HSTS stays off: TLS ends in front of the gateway, which sets it.
 */
const SECURITY_HEADERS = securityHeaders({
  contentSecurityPolicy: { useDefaults: false, directives: { defaultSrc: ["'none'"], frameAncestors: ["'none'"] } },
  frameguard: { action: 'deny' as const },
  referrerPolicy: { policy: 'no-referrer' as const },
  crossOriginResourcePolicy: { policy: 'same-origin' as const },
  strictTransportSecurity: false,
});
export { BODY_LIMIT };

/** The whole gateway as a Fastify instance: testable with real listeners, started by server.ts. */
export function buildApp(deps: GatewayDeps): FastifyInstance {
  const app = Fastify({
    loggerInstance: deps.logger as FastifyBaseLogger,
    // Fastify's per-request lines are off: the access log (plugins/access-log.ts) writes one line per request, and
    // errors are logged by the error handler with the request id. No pino child logger per request either: it costs
    // on every request.
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
    // Errors Fastify answers before any hook runs (bad percent-encoding, an over-long path parameter): in the
    // envelope, with the request id, like every other answer.
    frameworkErrors: (err, request, reply) => {
      reply.header('X-Request-Id', request.id);
      sendError(request, reply, frameworkError(err));
    },
    // Requests Node's HTTP parser refuses (headers or request line over 16 KiB, garbage): answered on the socket.
    clientErrorHandler: (err, socket) => answerClientError(err, socket),
  });

  app.addHook('onRequest', (_request, reply, done) => {
    reply.headers(SECURITY_HEADERS);
    done();
  });
  registerServerErrorLog(app);
  closeSilentConnections(app);
  // Before any scope's error handler (the /v1 pass-through has its own): a refused body is read, not cut off.
  app.addHook('onError', (request, reply, err, done) => {
    drainRefusedBody(request, reply, err.code);
    done();
  });
  app.setValidatorCompiler(validatorCompiler);
  app.removeAllContentTypeParsers();
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (req, body, done) => {
    try {
      // JSON is UTF-8 (RFC 8259): a body declared in another charset would be read as something it is not.
      const charset = /;\s*charset\s*=\s*"?([^";\s]+)/i.exec(req.headers['content-type'] ?? '')?.[1];
      if (charset && charset.toLowerCase() !== 'utf-8' && charset.toLowerCase() !== 'utf8')
        throw new AppError('UNSUPPORTED_MEDIA_TYPE', 'JSON bodies must be UTF-8', { charset: charset.slice(0, 40) });
      // A signed body (a payment provider's webhook) goes on byte for byte: parsing would change what was signed.
      if (req.routeOptions.config.rawBody) return done(null, body);
      done(null, parseJsonBody(decodeUtf8(body as Buffer)));
    } catch (err) {
      done(err as Error, undefined);
    }
  });

  // Set first thing (not in onSend): every answer carries them, including 404s and errors, at no extra hook cost.
  // API answers are never cached (they carry tokens, keys and tenant data), except the public documents.
  app.decorateRequest('upstream', null);
  // What the gateway adds, for users and operators to see: its own time and the time spent in services.
  app.addHook('onSend', (request, reply, _payload, done) => {
    const total = reply.elapsedTime;
    const upstream = Math.min(request.upstream?.upstreamMs ?? 0, total);
    reply.header(
      'Server-Timing',
      `gw;dur=${(total - upstream).toFixed(2)}, upstream;dur=${upstream.toFixed(2)}, total;dur=${total.toFixed(2)}`,
    );
    // By route template (never the raw URL: ids would make a series per resource).
    const labels = { method: request.method, route: request.routeOptions.url ?? 'unmatched', status: String(reply.statusCode) };
    metrics.httpRequests.inc(labels);
    metrics.httpDuration.observe(labels, total / 1000);
    done();
  });
  app.addHook('onRequest', (request, reply, done) => {
    reply.header('X-Request-Id', request.id);
    if ((request.url.startsWith('/api/v1/') && !request.url.startsWith('/api/v1/openapi.json')) || request.url.startsWith('/v1/'))
      reply.header('Cache-Control', 'no-store');
    done();
  });

  // Every route, including the plain Fastify ones (health, JWKS, OpenAPI), so that a wrong method on any known
  // path is a 405 with an Allow header rather than a 404.
  const known: Array<{ pattern: RegExp; methods: string[] }> = [];
  app.addHook('onRoute', (r) => {
    known.push({ pattern: pathPattern(r.url), methods: ([] as string[]).concat(r.method) });
  });

  registerAccessLog(app);
  registerAuthentication(app, {
    resolver: deps.resolver,
    limiter: deps.limiter,
    publicOrigin: () => new URL(deps.config.publicUrl).origin,
  });
  registerVerifiedEmailGate(app, deps);
  registerIdempotency(app, () => deps.clients);
  registerRoutes(app, deps);
  registerPages(app);
  registerDocs(app, () => deps.config.publicUrl);

  app.setErrorHandler((err: FastifyError | AppError, request, reply) => sendError(request, reply, toAppError(err)));

  app.setNotFoundHandler((request, reply) => {
    const path = request.url.split('?')[0];
    const methods = allowedMethods(known, path);
    if (methods.length) {
      reply.header('Allow', methods.join(', '));
      return sendError(
        request,
        reply,
        new AppError('METHOD_NOT_ALLOWED', `Method ${request.method} is not allowed here`, { method: request.method, allowed: methods }),
      );
    }
    return sendError(request, reply, new AppError('RESOURCE_NOT_FOUND', 'No such route', { path: path.slice(0, 300) }));
  });

  return app;
}

function frameworkError(err: FastifyError): AppError {
  if (err.code === 'FST_ERR_BAD_URL')
    return new AppError('VALIDATION_ERROR', 'The URL is not correctly encoded', { reason: 'malformed_url' });
  if (err.code === 'FST_ERR_MAX_PARAM_LENGTH')
    return new AppError('VALIDATION_ERROR', 'A path parameter is too long', { reason: 'path_parameter_too_long' });
  return new AppError('VALIDATION_ERROR', 'Malformed request', { reason: 'malformed_request' });
}

function answerClientError(err: Error & { code?: string; rawPacket?: unknown }, socket: Duplex): void {
  if (err.code === 'ECONNRESET' || socket.destroyed) return;
  if (socket.writable) {
    const requestId = randomUUID();
    const [reason, message] =
      err.code === 'HPE_HEADER_OVERFLOW'
        ? ['headers_too_large', 'The request line and headers must stay under 16 KiB']
        : err.code === 'ERR_HTTP_REQUEST_TIMEOUT'
          ? ['request_timeout', 'The request was not received in time']
          : ['malformed_request', 'Malformed HTTP request'];
    // The OpenAI-compatible API answers in OpenAI's shape, here too (the request line is all there is to go by).
    const head = Buffer.isBuffer(err.rawPacket) ? err.rawPacket.subarray(0, 16).toString('latin1') : '';
    const openAi = /^[A-Z]{3,7} \/v1[/? ]/.test(head);
    const body = JSON.stringify(
      openAi
        ? { error: { message, type: 'invalid_request_error', code: reason, param: null } }
        : {
            error: { code: 'VALIDATION_ERROR', message, details: { reason } },
            meta: { request_id: requestId, timestamp: new Date().toISOString() },
          },
    );
    socket.write(
      `HTTP/1.1 400 Bad Request\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: ${Buffer.byteLength(body)}\r\n` +
        `X-Request-Id: ${requestId}\r\nConnection: close\r\n\r\n${body}`,
    );
  }
  socket.destroy(err);
}

function pathPattern(url: string): RegExp {
  const source = url
    .split(/(:[A-Za-z_]+|\*)/)
    .map((part) => (part === '*' ? '.*' : part.startsWith(':') ? '[^/]+' : part.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')))
    .join('');
  return new RegExp(`^${source}/?$`);
}

function allowedMethods(known: Array<{ pattern: RegExp; methods: string[] }>, path: string): string[] {
  const methods = new Set<string>();
  for (const r of known) if (r.pattern.test(path)) for (const m of r.methods) methods.add(m);
  return [...methods];
}
