import type { Client } from './http';

// The operations of the live OpenAPI document, and what the suites that walk it need from their schemas: a valid
// sample and a check of whether a value is one the contract accepts.

export type Schema = {
  type?: string;
  anyOf?: Schema[];
  const?: unknown;
  properties?: Record<string, Schema>;
  required?: string[];
  additionalProperties?: boolean;
  items?: Schema;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  maxItems?: number;
};

export interface Operation {
  method: string;
  path: string;
  operationId: string;
  access: string;
  body?: Schema;
  query: Array<{ name: string; schema: Schema; required?: boolean }>;
  params: string[];
}

/** Every operation but the document itself. */
export async function loadOperations(api: Client): Promise<Operation[]> {
  const doc = (await api.get('/api/v1/openapi.json')).body;
  const ops: Operation[] = [];
  for (const [path, methods] of Object.entries(doc.paths as Record<string, Record<string, any>>)) {
    for (const [method, op] of Object.entries(methods)) {
      const parameters: Array<{ name: string; in: string; schema: Schema; required?: boolean }> = op.parameters ?? [];
      ops.push({
        method: method.toUpperCase(),
        path,
        operationId: op.operationId,
        access: op['x-access'],
        body: op.requestBody?.content?.['application/json']?.schema,
        query: parameters.filter((p) => p.in === 'query'),
        params: parameters.filter((p) => p.in === 'path').map((p) => p.name),
      });
    }
  }
  return ops.filter((o) => o.path !== '/api/v1/openapi.json');
}

/** A valid value for a schema: the smallest thing it accepts. */
export function sample(s: Schema): unknown {
  if (s.anyOf) return sample(s.anyOf.find((x) => x.type !== 'null') ?? s.anyOf[0]);
  if ('const' in s) return s.const;
  switch (s.type) {
    case 'string':
      return 'x'.repeat(Math.max(s.minLength ?? 1, 1));
    case 'integer':
    case 'number':
      return s.minimum ?? 1;
    case 'boolean':
      return false;
    case 'array':
      return [];
    case 'object':
      return Object.fromEntries((s.required ?? []).map((k) => [k, sample(s.properties![k])]));
    default:
      return 'x';
  }
}

/** Does the published schema accept this value? Objects: their own fields, required ones and no unknown ones. */
export function accepts(s: Schema, v: unknown): boolean {
  if (s.anyOf) return s.anyOf.some((x) => accepts(x, v));
  if ('const' in s) return v === s.const;
  switch (s.type) {
    case 'null':
      return v === null;
    case 'string':
      return typeof v === 'string' && v.length >= (s.minLength ?? 0) && v.length <= (s.maxLength ?? Infinity);
    case 'integer':
      return Number.isInteger(v) && (v as number) >= (s.minimum ?? -Infinity) && (v as number) <= (s.maximum ?? Infinity);
    case 'number':
      return typeof v === 'number' && v >= (s.minimum ?? -Infinity) && v <= (s.maximum ?? Infinity);
    case 'boolean':
      return typeof v === 'boolean';
    case 'array':
      return Array.isArray(v) && v.length <= (s.maxItems ?? Infinity) && (!s.items || v.every((x) => accepts(s.items!, x)));
    case 'object':
      return typeof v === 'object' && v !== null && !Array.isArray(v);
    default:
      return true;
  }
}

/** Does a whole body pass its schema's shape (every field accepted, required ones present, no unknown ones)? */
export function acceptsBody(s: Schema, v: unknown): boolean {
  if (!accepts(s, v) || s.type !== 'object') return accepts(s, v);
  const o = v as Record<string, unknown>;
  const props = s.properties ?? {};
  if ((s.required ?? []).some((k) => !(k in o))) return false;
  if (s.additionalProperties === false && Object.keys(o).some((k) => !(k in props))) return false;
  return Object.entries(o).every(([k, x]) => !(k in props) || accepts(props[k], x));
}

/** The error envelope of CONTRACT.md: code, message, details, and the request id echoed in meta. */
export function isErrorEnvelope(res: { status: number; headers: Headers; body: any }): boolean {
  return (
    typeof res.body?.error?.code === 'string' &&
    typeof res.body.error.message === 'string' &&
    typeof res.body.error.details === 'object' &&
    res.body.meta?.request_id === res.headers.get('x-request-id')
  );
}

/** OpenAI's error shape (the /v1 routes): message, type, code and param, and the request id in the header. */
export function isOpenAiError(res: { status: number; headers: Headers; body: any }): boolean {
  const e = res.body?.error;
  return (
    typeof e?.message === 'string' &&
    typeof e.type === 'string' &&
    (typeof e.code === 'string' || e.code === null) &&
    (typeof e.param === 'string' || e.param === null) &&
    Object.keys(res.body).length === 1 &&
    Boolean(res.headers.get('x-request-id'))
  );
}
