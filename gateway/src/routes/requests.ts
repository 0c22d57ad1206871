import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import type { billingV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { pageOf, route } from '../lib/route';
import { IdParams, Nullable, Obj, PageQuery, Str, Timestamp } from '../schemas';

const SOURCES = ['chat', 'agent', 'v1', 'passthrough', 'mcp'] as const;
const STATUSES = ['ok', 'error', 'cancelled'] as const;
const oneOf = (values: readonly string[], description: string) =>
  Type.Union(
    values.map((v) => Type.Literal(v)),
    { description },
  );
const orNull = (description: string) => Nullable(Type.String({ description: `${description}; null when none` }));

const RequestLogEntry = Obj({
  id: Type.String(),
  at: Timestamp,
  source: oneOf(SOURCES, 'The path the call came by: REST chat, an agent run, /v1, /v1/passthrough or /mcp'),
  requestId: orNull('The X-Request-Id of the HTTP request that started the call'),
  apiKeyId: orNull('The API key that made the call'),
  userId: orNull('The user behind the call (a session’s user, or the key’s creator)'),
  endUser: orNull('OpenAI’s `user` field, or the X-End-User header (at most 200 characters)'),
  model: Type.String({ description: 'The model as the caller asked for it: a catalogue name, or the default model’s name' }),
  servedModel: orNull('The provider’s model that served the call'),
  provider: orNull('The provider that served the call'),
  status: oneOf(STATUSES, 'ok; error (the call failed, see errorCode); cancelled (the caller left or cancelled)'),
  errorCode: orNull('Why the call failed'),
  inputTokens: Type.Integer(),
  outputTokens: Type.Integer(),
  credits: Type.Integer({ description: 'The call’s ledger debit (0 for a call that billed nothing)' }),
  latencyMs: Type.Integer({ description: 'From the call’s start to its end' }),
  ttftMs: Type.Integer({ description: 'Time to the first token; 0 when none came' }),
});

const Iso = (description: string) => Str(1, 40, { description: `ISO 8601 date-time: ${description}` });
const RequestsQuery = Obj({
  ...PageQuery.properties,
  from: Type.Optional(Iso('calls at or after this time')),
  to: Type.Optional(Iso('calls before this time (exclusive)')),
  model: Type.Optional(
    Str(1, 200, { pattern: '^[A-Za-z0-9._:/@+-]+$', description: 'The model as the caller asked for it (a model name’s characters)' }),
  ),
  apiKeyId: Type.Optional(Str(1, 100, { pattern: '^[A-Za-z0-9_-]+$', description: 'Calls of this API key (its id)' })),
  source: Type.Optional(oneOf(SOURCES, 'Calls that came by this path')),
  status: Type.Optional(oneOf(STATUSES, 'Calls that ended so')),
});

function requestView(e: billingV1.RequestLogEntry) {
  return {
    id: e.id,
    at: e.at,
    source: e.source,
    requestId: e.requestId || null,
    apiKeyId: e.apiKeyId || null,
    userId: e.userId || null,
    endUser: e.endUser || null,
    model: e.model,
    servedModel: e.servedModel || null,
    provider: e.provider || null,
    status: e.status,
    errorCode: e.errorCode || null,
    inputTokens: e.inputTokens,
    outputTokens: e.outputTokens,
    credits: e.credits,
    latencyMs: e.latencyMs,
    ttftMs: e.ttftMs,
  };
}

/** The request log (CONTRACT.md 12): one entry per model call, kept by billing; scope billing:read. */
export function requestRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const { billing } = deps.clients;

  route(app, {
    method: 'GET',
    url: '/api/v1/requests',
    operationId: 'listRequests',
    access: 'billing:read',
    tag: 'billing',
    summary:
      'The request log: one entry per model call on every path, newest first, with its tokens and the credits it was billed; no prompt or answer is kept; kept REQUEST_LOG_RETENTION_DAYS (30)',
    query: RequestsQuery,
    list: true,
    response: RequestLogEntry,
    handler: async ({ query, call }) => {
      const res = await billing.listRequests(
        {
          from: query.from ?? '',
          to: query.to ?? '',
          model: query.model ?? '',
          apiKeyId: query.apiKeyId ?? '',
          source: query.source ?? '',
          status: query.status ?? '',
          cursor: query.cursor ?? '',
          limit: query.limit,
        },
        call,
      );
      return pageOf(res.entries.map(requestView), query.limit, res.nextCursor);
    },
  });

  route(app, {
    method: 'GET',
    url: '/api/v1/requests/:id',
    operationId: 'getRequest',
    access: 'billing:read',
    tag: 'billing',
    summary: 'One model call of the request log',
    params: IdParams,
    response: RequestLogEntry,
    handler: async ({ params, call }) => requestView((await billing.getRequest({ id: params.id }, call)).entry!),
  });
}
