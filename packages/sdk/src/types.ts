/**
 * Request and answer types of every operation, derived from the generated OpenAPI types (`generated/schema.ts`):
 * nothing here is written by hand per endpoint, so the SDK cannot drift from the API.
 */
import type { operations } from './generated/schema';

export type OperationId = keyof operations;
type Op<K extends OperationId> = operations[K];

type PathOf<K extends OperationId> = Op<K>['parameters'] extends { path: infer P } ? ([P] extends [never] ? never : P) : never;
type QueryOf<K extends OperationId> = Op<K>['parameters'] extends { query?: infer Q }
  ? [Q] extends [never | undefined]
    ? never
    : Q
  : never;
type BodyOf<K extends OperationId> =
  Op<K> extends { requestBody: { content: { 'application/json': infer B } } }
    ? { body: B }
    : Op<K> extends { requestBody?: { content: { 'application/json': infer B } } }
      ? { body?: B }
      : unknown;

/** What a call takes: path parameters, query and body as the API defines them. */
export type Input<K extends OperationId> = ([PathOf<K>] extends [never] ? unknown : { params: PathOf<K> }) &
  ([QueryOf<K>] extends [never] ? unknown : { query?: QueryOf<K> }) &
  BodyOf<K>;

type SuccessOf<R> = R extends { 200: infer S } ? S : R extends { 201: infer S } ? S : R extends { 202: infer S } ? S : never;
type DataOf<S> = S extends { content: { 'application/json': { data: infer D } } } ? D : never;

/** What a call answers: the `data` of the success envelope. */
export type Output<K extends OperationId> = DataOf<SuccessOf<Op<K>['responses']>>;

export interface CallOptions {
  /** Sent as `Idempotency-Key` (billing POSTs get a fresh one when none is given). */
  idempotencyKey?: string;
  signal?: AbortSignal;
  headers?: Record<string, string>;
}
