/** Validation shared by both adapters. Nothing here touches an engine. */
import type { Scalar } from './types';

/** What the adapters read from a CollectionDef<T>, whatever T is. */
export interface AnyDef {
  name: string;
  sortField?: string;
  indexes?: Array<{ fields: string[]; unique?: boolean }>;
  retiredIndexes?: Array<{ fields: string[]; unique?: boolean; sortField?: string }>;
}

const NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/**
 * Collection and field names are the only text that reaches SQL or a MongoDB key; everything else is a bound
 * value. `__proto__` is refused as well so a name can never reach an object's prototype.
 */
export function assertName(name: string, what: string): string {
  if (typeof name !== 'string' || !NAME.test(name) || name === '__proto__') {
    throw new Error(`invalid ${what} name: ${JSON.stringify(name)}`);
  }
  return name;
}

export function isScalar(value: unknown): value is Scalar {
  return value === null || typeof value === 'string' || typeof value === 'boolean' || (typeof value === 'number' && Number.isFinite(value));
}

/**
 * A `where` as validated [field, value] pairs. Values come from user input, so only scalars pass: an object or
 * array could be an operator (`{ $gt: '' }`) in MongoDB. `undefined` is refused rather than ignored so that a
 * missing tenant id can never widen a query to every tenant.
 */
export function whereEntries(where: object | undefined): Array<[string, Scalar]> {
  if (where === undefined) return [];
  if (where === null || typeof where !== 'object' || Array.isArray(where)) throw new Error('where must be an object');
  return Object.entries(where).map(([field, value]) => {
    assertName(field, 'field');
    if (!isScalar(value)) {
      throw new Error(`where.${field} must be a string, finite number, boolean or null`);
    }
    return [field, value];
  });
}

export type RangeOp = 'gt' | 'gte' | 'lt' | 'lte';

/**
 * A `FindOptions.range` as validated [operator, value] pairs: strings or finite numbers only (like `where` values, an
 * object could be a MongoDB operator), one lower and one upper bound at most.
 */
export function rangeEntries(range: object | undefined): Array<[RangeOp, string | number]> {
  if (range === undefined) return [];
  if (range === null || typeof range !== 'object' || Array.isArray(range)) throw new Error('range must be an object');
  const out: Array<[RangeOp, string | number]> = [];
  for (const [op, value] of Object.entries(range)) {
    if (value === undefined) continue;
    if (op !== 'gt' && op !== 'gte' && op !== 'lt' && op !== 'lte') throw new Error(`unknown range bound ${JSON.stringify(op)}`);
    if (typeof value !== 'string' && !(typeof value === 'number' && Number.isFinite(value)))
      throw new Error(`range.${op} must be a string or a finite number`);
    out.push([op, value]);
  }
  const count = (ops: RangeOp[]) => out.filter(([op]) => ops.includes(op)).length;
  if (count(['gt', 'gte']) > 1 || count(['lt', 'lte']) > 1) throw new Error('range takes one lower and one upper bound at most');
  return out;
}

/** Patch fields that are set, names validated; an attempt to change the id is refused. */
export function patchEntries(id: string, patch: object): Array<[string, unknown]> {
  const entries = Object.entries(patch).filter(([, value]) => value !== undefined);
  for (const [field, value] of entries) {
    assertName(field, 'field');
    if (field === 'id' && value !== id) throw new Error('update cannot change id');
  }
  return entries.filter(([field]) => field !== 'id');
}

export function incrementEntries(by: object): Array<[string, number]> {
  const entries = Object.entries(by).filter(([, value]) => value !== undefined);
  for (const [field, value] of entries) {
    assertName(field, 'field');
    if (field === 'id') throw new Error('cannot increment id');
    if (typeof value !== 'number' || !Number.isFinite(value)) throw new Error(`increment.${field} must be a finite number`);
  }
  return entries as Array<[string, number]>;
}

/** Ids reach MongoDB as `_id` values: anything but a string (an object could be an operator) is refused. */
export function assertId(id: unknown, { allowEmpty = false } = {}): asserts id is string {
  if (typeof id !== 'string' || (!allowEmpty && id.length === 0)) throw new Error('id must be a non-empty string');
}

/** The validated shape of a definition, computed once per definition object. */
export interface Schema {
  name: string;
  sortField: string;
  indexes: Array<{ fields: string[]; unique: boolean }>;
  /** CollectionDef.retiredIndexes, each with the sort field it was declared under. */
  retiredIndexes: Array<{ fields: string[]; unique: boolean; sortField: string }>;
}

export function schemaOf(def: AnyDef): Schema {
  const name = assertName(def.name, 'collection');
  const sortField = assertName(def.sortField ?? 'createdAt', 'sort field');
  const indexOf = (index: { fields: string[]; unique?: boolean }) => {
    const fields = index.fields.map((field) => assertName(field, 'index field'));
    if (index.unique && fields.length === 0) throw new Error(`unique index on ${name} needs fields`);
    return { fields, unique: index.unique === true };
  };
  const indexes = (def.indexes ?? []).map(indexOf);
  const retiredIndexes = (def.retiredIndexes ?? []).map((index) => ({
    ...indexOf(index),
    sortField: assertName(index.sortField ?? sortField, 'sort field'),
  }));
  return { name, sortField, indexes, retiredIndexes };
}

/** The value a document sorts by, as stored in a cursor. */
export function sortValueOf(doc: Record<string, unknown>, sortField: string): Scalar {
  const value = doc[sortField];
  if (value === undefined) return null;
  if (!isScalar(value)) throw new Error(`sort field ${sortField} must hold a string, number, boolean or null`);
  return value;
}

/**
 * Refuses an explicit null in a field of a unique index (see IndexDef): SQLite lets NULLs repeat in a unique
 * index while MongoDB would count null as a value, so neither is allowed and both adapters behave the same.
 */
export function assertNoNullInUnique(schema: Schema, fields: Iterable<[string, unknown]>): void {
  for (const [field, value] of fields) {
    if (value !== null) continue;
    if (schema.indexes.some((index) => index.unique && index.fields.includes(field))) {
      throw new Error(`${schema.name}.${field} is in a unique index: leave it out rather than set it to null`);
    }
  }
}
