// Writes packages/proto/src/event-catalogue.ts: the public event catalogue (GET /event-types), generated from the
// protobuf messages that define the events. A message with the `events.v1.public_event` option is the `data` of each
// type it names; its JSON Schema (draft 2020-12) follows the message: each field under its JSON name, required unless
// declared `optional` (then it may also be null or left out), nested messages inline, field comments as descriptions.
// Run by `npm run proto` after `buf generate`, so `npm run proto:check` fails when the catalogue is stale.
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const root = new URL('..', import.meta.url).pathname;
const out = join(root, 'packages/proto/src');
const OPTION = '[events.v1.public_event]';
const DRAFT = 'https://json-schema.org/draft/2020-12/schema';

const buf = join(root, 'node_modules/.bin/buf');
const image = JSON.parse(
  execFileSync(buf, ['build', 'proto', '-o', '-#format=json'], { cwd: root, maxBuffer: 64 * 1024 * 1024, encoding: 'utf8' }),
);

/** Every message of the image by full name (`.events.v1.ProjectPayload`), with its comments. */
const messages = new Map();
for (const file of image.file) {
  const comments = new Map();
  for (const loc of file.sourceCodeInfo?.location ?? []) {
    const text = loc.leadingComments?.trim().replace(/\s*\n\s*/g, ' ');
    if (text) comments.set(loc.path.join('.'), text);
  }
  const walk = (list, prefix, path) =>
    (list ?? []).forEach((m, i) => {
      const at = [...path, i];
      const name = `${prefix}.${m.name}`;
      messages.set(name, {
        message: m,
        file: file.name,
        comment: comments.get(at.join('.')),
        fieldComment: (j) => comments.get([...at, 2, j].join('.')),
      });
      walk(m.nestedType, name, [...at, 3]);
    });
  walk(file.messageType, `.${file.package}`, [4]);
}

const SCALARS = {
  TYPE_STRING: { type: 'string' },
  TYPE_BYTES: { type: 'string', contentEncoding: 'base64' },
  TYPE_BOOL: { type: 'boolean' },
  TYPE_DOUBLE: { type: 'number' },
  TYPE_FLOAT: { type: 'number' },
  TYPE_INT32: { type: 'integer' },
  TYPE_SINT32: { type: 'integer' },
  TYPE_SFIXED32: { type: 'integer' },
  TYPE_INT64: { type: 'integer' },
  TYPE_SINT64: { type: 'integer' },
  TYPE_SFIXED64: { type: 'integer' },
  TYPE_UINT32: { type: 'integer', minimum: 0 },
  TYPE_FIXED32: { type: 'integer', minimum: 0 },
  TYPE_UINT64: { type: 'integer', minimum: 0 },
  TYPE_FIXED64: { type: 'integer', minimum: 0 },
};
/** Well-known types as their JSON form. */
const WELL_KNOWN = {
  '.google.protobuf.Struct': { type: 'object' },
  '.google.protobuf.Value': {},
  '.google.protobuf.ListValue': { type: 'array' },
};

function schemaOf(name, seen = []) {
  if (WELL_KNOWN[name]) return { ...WELL_KNOWN[name] };
  const entry = messages.get(name);
  if (!entry) throw new Error(`event catalogue: unknown message ${name}`);
  if (seen.includes(name)) throw new Error(`event catalogue: ${name} contains itself; event data must be a tree`);
  const { message } = entry;
  if (message.options?.mapEntry) throw new Error(`event catalogue: map fields are not supported (${name})`);
  const properties = {};
  const required = [];
  (message.field ?? []).forEach((f, j) => {
    if (f.oneofIndex !== undefined && !f.proto3Optional)
      throw new Error(`event catalogue: oneof fields are not supported (${name}.${f.name}): use optional fields`);
    let s;
    if (f.type === 'TYPE_MESSAGE') s = schemaOf(f.typeName, [...seen, name]);
    else if (f.type === 'TYPE_ENUM') throw new Error(`event catalogue: enum fields are not supported (${name}.${f.name}): use a string`);
    else if (SCALARS[f.type]) s = { ...SCALARS[f.type] };
    else throw new Error(`event catalogue: unsupported field type ${f.type} (${name}.${f.name})`);
    if (f.label === 'LABEL_REPEATED') s = { type: 'array', items: s };
    if (f.proto3Optional)
      s = typeof s.type === 'string' && Object.keys(s).length === 1 ? { type: [s.type, 'null'] } : { anyOf: [s, { type: 'null' }] };
    else required.push(f.jsonName);
    const description = entry.fieldComment(j);
    properties[f.jsonName] = description ? { description, ...s } : s;
  });
  return {
    title: name.slice(1),
    ...(entry.comment ? { description: entry.comment } : {}),
    type: 'object',
    properties,
    required,
    additionalProperties: false,
  };
}

const types = [];
for (const [name, { message }] of messages) {
  for (const option of message.options?.[OPTION] ?? []) {
    if (!/^[a-z]+(_[a-z]+)*\.[a-z]+(_[a-z]+)*$/.test(option.type)) throw new Error(`event catalogue: bad type name ${option.type}`);
    if (!(option.version >= 1)) throw new Error(`event catalogue: ${option.type} needs a version of 1 or more`);
    if (!option.description) throw new Error(`event catalogue: ${option.type} needs a description`);
    if (types.some((t) => t.type === option.type)) throw new Error(`event catalogue: ${option.type} is declared twice`);
    types.push({ type: option.type, description: option.description, version: option.version, message: name.slice(1) });
  }
}
types.sort((a, b) => (a.type < b.type ? -1 : 1));
/** One schema per message, shared by the types it defines. */
const schemas = Object.fromEntries(
  [...new Set(types.map((t) => t.message))].sort().map((m) => [m, { $schema: DRAFT, ...schemaOf(`.${m}`) }]),
);

const lines = [
  '// Generated by scripts/event-catalogue.mjs from the `public_event` options in proto/. Do not edit: run `npm run proto`.',
  '',
  '/** One public event type (GET /event-types): when it is emitted, its version, and the JSON Schema of its `data`. */',
  'export interface EventTypeSpec {',
  '  type: string;',
  '  description: string;',
  '  version: number;',
  '  /** The protobuf message that defines `data`. */',
  '  message: string;',
  '  /** JSON Schema (draft 2020-12) of `data`, generated from the message. */',
  '  schema: Record<string, unknown>;',
  '}',
  '',
  '/** Every type a webhook can subscribe to (`webhook.test` aside: it is sent on request, never subscribed to). */',
  `export const PUBLIC_EVENT_TYPES = ${JSON.stringify(types.map((t) => t.type))} as const;`,
  'export type PublicEventType = (typeof PUBLIC_EVENT_TYPES)[number];',
  '',
  '/** The JSON Schema of each message that defines the data of a public type. */',
  `const SCHEMAS: Record<string, Record<string, unknown>> = ${JSON.stringify(schemas, null, 2)};`,
  '',
  'export const EVENT_TYPES: readonly EventTypeSpec[] = [',
  ...types.map((t) => {
    const fields = Object.entries(t).map(([key, value]) => `${key}: ${JSON.stringify(value)}`);
    return `  { ${fields.join(', ')}, schema: SCHEMAS[${JSON.stringify(t.message)}] },`;
  }),
  '];',
  '',
];
writeFileSync(join(out, 'event-catalogue.ts'), lines.join('\n'));

// ts-proto also writes the types of every file a proto imports; events.proto imports descriptor.proto only to declare
// its option, and nothing uses those types (a quarter of a megabyte): left out unless some generated file imports them.
const descriptor = join(out, 'google/protobuf/descriptor.ts');
const sources = [];
const walk = (dir) => {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) walk(path);
    else if (name.endsWith('.ts') && path !== descriptor) sources.push(path);
  }
};
walk(out);
if (existsSync(descriptor) && !sources.some((path) => readFileSync(path, 'utf8').includes('/protobuf/descriptor"'))) rmSync(descriptor);
