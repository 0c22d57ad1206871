import { type SchemaOptions, Type, type TObject, type TProperties, type TSchema } from '@sinclair/typebox';

/** Objects refuse unknown fields everywhere: no mass assignment, typos answered with a 400. */
export const Obj = <P extends TProperties>(props: P, description?: string): TObject<P> =>
  Type.Object(props, { additionalProperties: false, ...(description ? { description } : {}) });

export const Str = (min: number, max: number, extra: object = {}) => Type.String({ minLength: min, maxLength: max, ...extra });
export const Timestamp = Type.String({ description: 'ISO 8601 UTC timestamp with milliseconds' });
export const Nullable = <T extends TSchema>(t: T, options?: SchemaOptions) => Type.Union([t, Type.Null()], options);

export const PageQuery = Obj({
  limit: Type.Optional(Type.Integer({ minimum: 1, maximum: 100, default: 20 })),
  cursor: Type.Optional(Str(1, 512)),
});

export const IdParams = Obj({ id: Str(1, 100) });

export const User = Obj({
  id: Type.String(),
  email: Type.String(),
  name: Type.String(),
  role: Type.String(),
  createdAt: Timestamp,
  emailVerified: Type.Boolean(),
});
export const Tenant = Obj({
  id: Type.String(),
  name: Type.String(),
  plan: Type.Union(['free', 'starter', 'growth', 'enterprise'].map((p) => Type.Literal(p))),
  createdAt: Timestamp,
});
