/**
 * The SDK's resources and named types, from the OpenAPI paths (used by sdk-generate.ts). The rule, in full:
 * - The path after /api/v1 is split on '/': each static segment, camelCased, is a resource nested in the one before
 *   (`/agents/{id}/runs` -> `agents.runs`); each `{param}` is a positional argument, in order.
 * - A path ending in a parameter names one item: GET `retrieve`, PATCH and PUT `update`, DELETE `del`.
 * - A path ending in a static segment: GET `list` when it answers an array, else `retrieve`; PATCH and PUT `update`;
 *   DELETE `del`; POST `create` when the path also has a GET. Any other POST is an action named by its last segment,
 *   which leaves the chain (`POST /api-keys/{id}/rotate` -> `apiKeys.rotate(id)`), as is a GET that streams
 *   (`GET /chat/sessions/{id}/stream` -> `chat.sessions.stream(id)`).
 * - RENAMES places the few operations that read better elsewhere.
 * Named types: the object a resource's operations answer is `components.schemas[Singular]` (`projects` -> `Project`,
 * `agents.runs` -> `AgentRun`); an answer of another shape is `<Singular><Method>Response`, a request body
 * `<Singular><Method>Params`. Each is hoisted out of its operation and referenced, so openapi-typescript names it.
 */

export interface Operation {
  operationId: string;
  summary: string;
  'x-access': string;
  requestBody?: { required?: boolean; content: Record<string, { schema: Schema }> };
  parameters?: Array<{ name: string; in: string; required: boolean }>;
  responses: Record<string, { content?: Record<string, { schema: Schema }> }>;
}
type Schema = Record<string, any>;
export interface OpenApi {
  paths: Record<string, Record<string, Operation>>;
  components: { schemas: Record<string, Schema> };
}

export interface ResourceMethod {
  /** e.g. ['agents', 'runs'] */
  chain: string[];
  /** e.g. 'create' */
  name: string;
  operationId: string;
  method: string;
  path: string;
  op: Operation;
}

const RENAMES: Record<string, string> = {
  executeAgent: 'agents.runs.create',
  me: 'auth.me',
  verifyAuditLog: 'auditLog.verify',
  adminMintGiftCards: 'admin.giftCards.create',
  createBillingPortal: 'billing.portal.create',
};
/** Type names that would shadow a well-known global. */
const TYPE_NAMES: Record<string, string> = { Request: 'RequestLogEntry', Event: 'SvcEvent', AuditLog: 'AuditLogEntry' };
const PREFIX = '/api/v1/';

const camel = (s: string) => s.replace(/[-_]([a-z])/g, (_, c: string) => c.toUpperCase());
const pascal = (s: string) => camel(s).replace(/^./, (c) => c.toUpperCase());
const singular = (s: string) => (/ies$/.test(s) ? s.replace(/ies$/, 'y') : /(ss|us|is|settings)$/.test(s) ? s : s.replace(/s$/, ''));

export const successOf = (op: Operation) => Object.keys(op.responses).find((s) => s.startsWith('2'))!;
const dataSchemaOf = (op: Operation): Schema | undefined =>
  op.responses[successOf(op)].content?.['application/json']?.schema?.properties?.data;
export const isStream = (op: Operation) => Boolean(op.responses[successOf(op)].content?.['text/event-stream']);
export const answersArray = (op: Operation) => dataSchemaOf(op)?.type === 'array';

/** Every operation of the document as a resource method, by the rule above. */
export function resourceMethods(doc: OpenApi): ResourceMethod[] {
  const out: ResourceMethod[] = [];
  for (const [path, byMethod] of Object.entries(doc.paths)) {
    if (!path.startsWith(PREFIX)) continue;
    const segments = path.slice(PREFIX.length).split('/');
    const chain = segments.filter((s) => !s.startsWith('{')).map(camel);
    const endsInParam = segments[segments.length - 1].startsWith('{');
    for (const [method, op] of Object.entries(byMethod)) {
      let name: string;
      let at = chain;
      if (method === 'get' && isStream(op)) [name, at] = [chain[chain.length - 1], chain.slice(0, -1)];
      else if (method === 'get') name = !endsInParam && answersArray(op) ? 'list' : 'retrieve';
      else if (method === 'patch' || method === 'put') name = 'update';
      else if (method === 'delete') name = 'del';
      else if (!endsInParam && byMethod.get) name = 'create';
      else [name, at] = [chain[chain.length - 1], chain.slice(0, -1)];
      const renamed = RENAMES[op.operationId]?.split('.');
      if (renamed) [name, at] = [renamed[renamed.length - 1], renamed.slice(0, -1)];
      out.push({ chain: at, name, operationId: op.operationId, method, path, op });
    }
  }
  // One name, one thing: a method is never also a resource, and no two operations share a method.
  const methods = new Set(out.map((m) => [...m.chain, m.name].join('.')));
  if (methods.size !== out.length) throw new Error('two operations map to one resource method: add a RENAMES entry');
  for (const m of out)
    for (let i = 1; i <= m.chain.length; i++)
      if (methods.has(m.chain.slice(0, i).join('.'))) throw new Error(`${m.chain.slice(0, i).join('.')} is a method and a resource`);
  return out;
}

const typeName = (chain: string[]) => {
  const name = chain.map((s) => pascal(singular(s))).join('');
  return TYPE_NAMES[name] ?? name;
};

/**
 * Moves each operation's answer object and request body into `components.schemas` under a name from its resource, and
 * references it there. Operations that answer one shape share one name; the first to claim a name is the resource's
 * `retrieve` (the item itself) when it has one.
 */
export function hoistSchemas(doc: OpenApi, methods: ResourceMethod[]): void {
  const schemas = doc.components.schemas;
  const order = ['retrieve', 'list', 'create', 'update'];
  const rank = (m: ResourceMethod) => (order.includes(m.name) ? order.indexOf(m.name) : order.length);
  /** The first name that is free (then taken) or already holds this very schema. */
  const claim = (names: string[], schema: Schema): string => {
    for (const name of names) {
      schemas[name] ??= schema;
      if (JSON.stringify(schemas[name]) === JSON.stringify(schema)) return name;
    }
    throw new Error(`two different schemas are named ${names.join(' or ')}`);
  };
  const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });
  for (const m of [...methods].sort((a, b) => rank(a) - rank(b))) {
    const base = m.name === 'stream' ? '' : typeName(m.chain);
    if (!base) continue;
    const other = m.name === 'del' ? `${base}Deleted` : `${base}${pascal(m.name)}Response`;
    // An action's answer is the resource only when it has the resource's shape.
    const names = order.includes(m.name) || schemas[base] ? [base, other] : [other];
    const body = m.op.responses[successOf(m.op)].content?.['application/json']?.schema?.properties;
    const data = body?.data;
    if (data?.type === 'object') body.data = ref(claim(names, data));
    else if (data?.type === 'array' && data.items?.type === 'object') data.items = ref(claim([base, `${base}Item`], data.items));
    const request = m.op.requestBody?.content['application/json'];
    if (request?.schema?.type === 'object') request.schema = ref(claim([`${base}${pascal(m.name)}Params`], request.schema));
  }
}
