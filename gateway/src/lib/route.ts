import type { TSchema } from '@sinclair/typebox';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { errors, type CallOptions } from '@svc/kit';
import { Obj } from '../schemas';
import { success, type Pagination } from './envelope';
import type { PolicyName } from './policy';
import type { Principal } from './principal';

type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';

export interface HandlerArgs {
  body: any;
  query: any;
  params: any;
  /** Present on every route whose policy authenticates. */
  principal: Principal;
  /** gRPC call options carrying the principal's token, the request id and the client address. */
  call: CallOptions;
  request: FastifyRequest;
  reply: FastifyReply;
}

export interface ListResult {
  items: unknown[];
  pagination: Pagination;
}

export interface RouteSpec {
  method: Method;
  url: string;
  /** Unique camelCase name of the operation (`getProject`): the OpenAPI operationId and the SDK's method name. */
  operationId: string;
  access: PolicyName;
  summary: string;
  /** Longer documentation of the operation (CommonMark), shown under it in the OpenAPI document and /docs. */
  description?: string;
  tag: string;
  body?: TSchema;
  /** The body may be left out; it is then validated as `{}` (an action with optional parameters). */
  optionalBody?: boolean;
  query?: TSchema;
  params?: TSchema;
  /** Schema of `data` in the success envelope (documentation). */
  response?: TSchema;
  status?: number;
  /** `data` is an array with `meta.pagination`. */
  list?: boolean;
  /** Media type of a success answer that is not the JSON envelope (the handler writes it itself). */
  produces?: 'text/event-stream';
  /**
   * False: the answer is the handler's value itself, not the `{data, meta}` envelope, and errors use OpenAI's shape
   * (the OpenAI-compatible API under /v1).
   */
  envelope?: false;
  /** Another media type the handler answers in when the request's Accept asks for it (documentation). */
  alsoProduces?: 'text/csv' | 'text/event-stream';
  /** Default: rate limited when authenticated, except the auth, CLI-login and OAuth routes. */
  rateLimited?: boolean;
  /** The JSON body is handed over unparsed, as the Buffer received (a signature covers its exact bytes). */
  rawBody?: boolean;
  /**
   * The route starts model calls (a chat reply, an agent run, a completion): REQUIRE_VERIFIED_EMAIL refuses it to a
   * user who has not verified their email (lib/verified-email.ts).
   */
  modelCall?: true;
  handler: (args: HandlerArgs) => Promise<unknown>;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    access?: PolicyName;
    rateLimited?: boolean;
    rawBody?: boolean;
    /** The route starts model calls (RouteSpec.modelCall): REQUIRE_VERIFIED_EMAIL's gate reads it. */
    modelCall?: boolean;
  }
  interface FastifyRequest {
    principal: Principal | null;
    /** Time spent in service calls for this request (Server-Timing `upstream`). */
    upstream: { upstreamMs: number } | null;
  }
}

const registries = new WeakMap<FastifyInstance, RouteSpec[]>();

/** The routes registered on an app, for the OpenAPI document and the 405 answers. */
export function routesOf(app: FastifyInstance): RouteSpec[] {
  let list = registries.get(app);
  if (!list) registries.set(app, (list = []));
  return list;
}

const NO_QUERY = Obj({});

/**
 * Path parameters that name a resource by id, and the resource each names (for `:id`, by the path segment before
 * it). Our ids are `<prefix>_<base62>` (kit newId): anything else cannot exist, so it is a plain 404 here, never
 * sent on to a service (where it would reach metadata and logs).
 */
const ID_SHAPE = /^[a-z]{2,8}_[0-9A-Za-z]{1,64}$/;
const RESOURCE_OF_PARAM: Record<string, string> = { run_id: 'run', deliveryId: 'delivery', userId: 'member', tenantId: 'tenant' };
const RESOURCE_OF_SEGMENT: Record<string, string> = {
  projects: 'project',
  agents: 'agent',
  'api-keys': 'api_key',
  sessions: 'chat_session',
  webhooks: 'webhook',
  'mcp-servers': 'mcp_server',
  events: 'event',
  responses: 'response',
  invitations: 'invitation',
};

/** [param, resource] for each id parameter of a route URL. */
export function idParamsOf(url: string): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  const segments = url.split('/');
  segments.forEach((segment, i) => {
    if (!segment.startsWith(':')) return;
    const name = segment.slice(1);
    const resource = name === 'id' ? RESOURCE_OF_SEGMENT[segments[i - 1]] : RESOURCE_OF_PARAM[name];
    if (resource) out.push([name, resource]);
  });
  return out;
}

const EXEMPT_FROM_RATE_LIMIT = /^\/api\/v1\/(auth|cli\/auth|oauth)\//;

export function route(app: FastifyInstance, spec: RouteSpec): void {
  const routes = routesOf(app);
  if (routes.some((r) => r.operationId === spec.operationId)) throw new Error(`duplicate operationId ${spec.operationId}`);
  routes.push(spec);
  const status = spec.status ?? 200;
  const idParams = idParamsOf(spec.url);
  app.route({
    method: spec.method,
    url: spec.url,
    schema: {
      ...(spec.body ? { body: spec.body } : {}),
      // A route without query parameters refuses any, as list routes refuse unknown ones.
      querystring: spec.query ?? NO_QUERY,
      ...(spec.params ? { params: spec.params } : {}),
    },
    // Runs before validation: a left-out body is checked (and handled) as an empty object; a JSON `null` is a body,
    // and refused as one that is not an object.
    ...(spec.optionalBody
      ? {
          preValidation: (request: FastifyRequest, _reply: FastifyReply, done: () => void) => {
            if (request.body === undefined) request.body = {};
            done();
          },
        }
      : {}),
    config: {
      access: spec.access,
      rateLimited: spec.rateLimited ?? (spec.access !== 'public' && !EXEMPT_FROM_RATE_LIMIT.test(spec.url)),
      rawBody: spec.rawBody ?? false,
      modelCall: spec.modelCall ?? false,
    },
    handler: async (request, reply) => {
      for (const [name, resource] of idParams) {
        const value = (request.params as Record<string, string>)[name];
        if (!ID_SHAPE.test(value)) throw errors.notFound(resource, value);
      }
      const principal = request.principal!;
      const timing = { upstreamMs: 0 };
      request.upstream = timing;
      const call: CallOptions = {
        token: principal?.token,
        requestId: request.id,
        clientIp: request.ip,
        userAgent: request.headers['user-agent'] ?? null,
        idempotencyKey: request.idempotency?.key ?? null,
        timing,
      };
      const result = await spec.handler({
        body: request.body,
        query: request.query,
        params: request.params,
        principal,
        call,
        request,
        reply,
      });
      if (reply.sent) return reply;
      reply.code(status);
      if (spec.envelope === false) return result;
      if (spec.list) {
        const { items, pagination } = result as ListResult;
        return success(request, items, pagination);
      }
      return success(request, result);
    },
  });
}

/** Builds `meta.pagination` from a service page answer. */
export function pageOf(items: unknown[], limit: number, nextCursor: string | undefined | null): ListResult {
  return { items, pagination: { limit, next_cursor: nextCursor || null, has_more: Boolean(nextCursor) } };
}
