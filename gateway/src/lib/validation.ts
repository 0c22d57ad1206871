import Ajv, { type ErrorObject } from 'ajv';
import type { FastifySchemaCompiler } from 'fastify';
import type { FieldError } from '@svc/kit';

// Bodies are validated strictly: no type coercion, unknown fields refused (no mass assignment), every error listed.
const strict = new Ajv({ allErrors: true, coerceTypes: false, removeAdditional: false, useDefaults: true, strict: false });
// Query strings arrive as text: numbers and booleans are coerced, unknown parameters still refused.
const query = new Ajv({ allErrors: true, coerceTypes: true, removeAdditional: false, useDefaults: true, strict: false });

export const validatorCompiler: FastifySchemaCompiler<unknown> = ({ schema, httpPart }) => {
  const ajv = httpPart === 'querystring' || httpPart === 'params' ? query : strict;
  return ajv.compile(schema as object) as never;
};

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
