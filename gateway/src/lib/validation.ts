import Ajv, { type ErrorObject } from 'ajv';
import type { FastifySchemaCompiler } from 'fastify';
import type { FieldError } from '@svc/kit';

// Bodies are validated strictly: no type coercion, unknown fields refused (no mass assignment), every error listed.
const strict = new Ajv({ allErrors: true, coerceTypes: false, removeAdditional: false, useDefaults: true, strict: false });
// Query strings arrive as text: numbers and booleans are coerced, unknown parameters still refused.
const query = new Ajv({ allErrors: true, coerceTypes: true, removeAdditional: false, useDefaults: true, strict: false });

/**
 * A route's validator is compiled by its first request, not when the gateway starts: Ajv's code generation for every
 * route was about half a second of each gateway start's CPU (and the memory of validators for routes a deployment
 * never calls); a route's first request pays its own compile, a few milliseconds. See docs/decisions.md.
 */
export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  let validate: Validate | null = null;
  const lazy: Validate = (data) => {
    validate ??=
      httpPart === 'querystring' || httpPart === 'params'
        ? decimalOnly(schema as Schema, query.compile(schema as object))
        : (strict.compile(schema as object) as Validate);
    const ok = validate(data);
    lazy.errors = validate.errors;
    return ok;
  };
  return lazy as never;
};

type Schema = { properties?: Record<string, { type?: string }> };
type Validate = ((data: unknown) => boolean) & { errors?: ErrorObject[] | null };

const DECIMAL = { integer: /^-?\d{1,16}$/, number: /^-?\d{1,16}(\.\d{1,16})?$/ } as const;

/**
 * Numbers in a query string are plain decimals: Ajv's coercion (Number()) would also take `0x10`, `1e2`, ` 16` or
 * `0b1` and read them as numbers the client may not have meant.
 */
function decimalOnly(schema: Schema, validate: Validate): Validate {
  const numeric = Object.entries(schema.properties ?? {}).filter(([, s]) => s.type === 'integer' || s.type === 'number');
  if (numeric.length === 0) return validate;
  const wrapped: Validate = (data) => {
    for (const [name, s] of numeric) {
      const value = (data as Record<string, unknown> | null)?.[name];
      if (typeof value === 'string' && !DECIMAL[s.type as 'integer' | 'number'].test(value)) {
        wrapped.errors = [
          { instancePath: `/${name}`, schemaPath: '', keyword: 'type', params: {}, message: `must be a decimal ${s.type}` } as ErrorObject,
        ];
        return false;
      }
    }
    const ok = validate(data);
    wrapped.errors = validate.errors;
    return ok;
  };
  return wrapped;
}

/** Ajv errors -> `details.fields`, with JSON paths as dotted field names. */
export function fieldErrors(errors: ErrorObject[], part: string): FieldError[] {
  const out: FieldError[] = [];
  for (const e of errors) {
    let field = e.instancePath
      .replace(/^\//, '')
      .replace(/\/(\d+)(?=\/|$)/g, '[$1]')
      .replace(/\//g, '.');
    let message = e.message ?? 'is not valid';
    if (e.keyword === 'additionalProperties') {
      const extra = (e.params as { additionalProperty: string }).additionalProperty;
      field = field ? `${field}.${extra}` : extra;
      message = 'is not an allowed field';
    } else if (e.keyword === 'required') {
      const missing = (e.params as { missingProperty: string }).missingProperty;
      field = field ? `${field}.${missing}` : missing;
      message = 'is required';
    } else if (e.keyword === 'type' && e.instancePath === '' && part === 'body') {
      message = `body ${message}`;
    }
    if (!field) field = part;
    if (!out.some((f) => f.field === field && f.message === message)) out.push({ field: field.slice(0, 200), message });
  }
  return out;
}
