import { Type, type TSchema } from '@sinclair/typebox';
import { ERROR_CODES } from '@svc/kit';
import { POLICIES } from './policy';
import type { RouteSpec } from './route';

const Meta = Type.Object({ request_id: Type.String(), timestamp: Type.String() });
const Pagination = Type.Object({ limit: Type.Integer(), next_cursor: Type.Union([Type.String(), Type.Null()]), has_more: Type.Boolean() });
const ErrorEnvelope = Type.Object({
  error: Type.Object({
    code: Type.Union(Object.keys(ERROR_CODES).map((c) => Type.Literal(c))),
    message: Type.String(),
    details: Type.Object({}),
  }),
  meta: Meta,
});

/** OpenAI's error shape, used by the OpenAI-compatible API under /v1 (CONTRACT.md 9). */
const OpenAiError = Type.Object({
  error: Type.Object({
    message: Type.String(),
    type: Type.String(),
    code: Type.Union([Type.String(), Type.Null()]),
    param: Type.Union([Type.String(), Type.Null()]),
  }),
});

/** The header every POST accepts (CONTRACT.md 14; gateway/src/plugins/idempotency.ts), one shared parameter. */
const IdempotencyKey = {
  name: 'Idempotency-Key',
  in: 'header',
  required: false,
  description:
    'Makes a retry safe: the same key with the same request within 24 h answers the first status and body again ' +
    '(with `Idempotent-Replayed: true`) and does the work once; the key with another request is a 422 ' +
    '`idempotency_key_reused`, and while the first is still running a 409 `idempotency_key_in_progress`. Kept per ' +
    'tenant, and per API key for API keys. A streamed answer is not replayed (409 `idempotency_key_streamed`).',
  schema: Type.String({ minLength: 1, maxLength: 255, pattern: '^[\\x20-\\x7e]+$' }),
};

/** OpenAPI 3.1 from the same TypeBox schemas that validate requests. */
export function buildOpenApi(routes: RouteSpec[], serverUrl: string) {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const r of routes) {
    const path = r.url.replace(/:([A-Za-z_]+)/g, '{$1}');
    const parameters: unknown[] = [
      ...paramsOf(r.params, 'path'),
      ...paramsOf(r.query, 'query'),
      ...(r.method === 'POST' ? [{ $ref: '#/components/parameters/IdempotencyKey' }] : []),
    ];
    const data: TSchema = r.response ?? Type.Object({});
    const successBody =
      r.envelope === false
        ? data
        : r.list
          ? Type.Object({ data: Type.Array(data), meta: Type.Intersect([Meta, Type.Object({ pagination: Pagination })]) })
          : Type.Object({ data, meta: Meta });
    const successContent = r.produces
      ? { [r.produces]: { schema: Type.String() } }
      : { 'application/json': { schema: successBody }, ...(r.alsoProduces ? { [r.alsoProduces]: { schema: Type.String() } } : {}) };
    const policy = POLICIES[r.access];
    (paths[path] ??= {})[r.method.toLowerCase()] = {
      operationId: r.operationId,
      summary: r.summary,
      ...(r.description ? { description: r.description } : {}),
      tags: [r.tag],
      ...(policy.authenticate ? {} : { security: [] }),
      ...(parameters.length ? { parameters } : {}),
      ...(r.body ? { requestBody: { required: !r.optionalBody, content: { 'application/json': { schema: r.body } } } } : {}),
      'x-access': r.access,
      responses: {
        [String(r.status ?? 200)]: { description: 'Success', content: successContent },
        default: {
          description: 'Error',
          content: { 'application/json': { schema: { $ref: `#/components/schemas/${r.envelope === false ? 'OpenAIError' : 'Error'}` } } },
        },
      },
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'svc platform API',
      version: '1.0.0',
      description: 'Multi-tenant API for AI applications. Every response uses the {data, meta} / {error, meta} envelope.',
    },
    servers: [{ url: serverUrl }],
    security: [{ bearer: [] }, { session: [] }],
    components: {
      securitySchemes: {
        bearer: { type: 'http', scheme: 'bearer', description: 'An API key (svc_sdk_..., svc_cli_..., ...) or an access token (JWT)' },
        session: { type: 'apiKey', in: 'cookie', name: 'svc_session' },
      },
      parameters: { IdempotencyKey },
      schemas: { Error: ErrorEnvelope, OpenAIError: OpenAiError },
    },
    paths,
  };
}

function paramsOf(schema: TSchema | undefined, where: 'path' | 'query') {
  if (!schema || !schema.properties) return [];
  const required = new Set<string>(schema.required ?? []);
  return Object.entries(schema.properties as Record<string, TSchema>).map(([name, s]) => ({
    name,
    in: where,
    required: where === 'path' || required.has(name),
    schema: s,
  }));
}
