/**
 * Request and answer types of every operation, derived from the generated OpenAPI types (`generated/schema.ts`):
 * nothing here is written by hand per endpoint, so the SDK cannot drift from the API.
 */
import type { operations } from './generated/schema';
import type { SseEvent } from './sse';

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
/** One element of a list operation's answer. */
export type Item<K extends OperationId> = Output<K> extends Array<infer T> ? T : never;
/** A resource method's body (the request's JSON) and query. */
export type Body<K extends OperationId> = Input<K> extends { body?: infer B } ? B : never;
export type Query<K extends OperationId> = Input<K> extends { query?: infer Q } ? Q : never;
/** What a streaming operation yields (the chat reply is its only one). */
export type StreamEvent<K extends OperationId> = K extends 'streamChatReply' ? ChatStreamEvent : SseEvent;

export interface RequestOptions {
  /** Sent as `Idempotency-Key` on a POST; by default every POST gets a fresh UUID, the same on each of its retries. */
  idempotencyKey?: string;
  signal?: AbortSignal;
  headers?: Record<string, string>;
  /** This call's limits, over the client's: ms per attempt, and retries after the first attempt. */
  timeout?: number;
  maxRetries?: number;
}
/** The options of the lower-layer methods (`svc.createProject({ body })`): the same. */
export type CallOptions = RequestOptions;

export interface StreamOptions extends RequestOptions {
  /** The stream's query parameters, if it has any. */
  query?: Record<string, string | number | boolean | undefined>;
  /** Resume after this event id (as `Last-Event-ID`). */
  lastEventId?: string;
  /** How many dropped connections in a row to resume before giving up (default 5; `Infinity` to follow for good). */
  maxResumes?: number;
  /** Runs each time a connection is open: events committed from then on are sent. */
  onOpen?: () => void;
  /** Runs before each resume, with the id of the last event seen. */
  onResume?: (lastEventId: string | undefined) => void;
}

export type ChatStreamEvent =
  | { type: 'delta'; id: string; messageId: string; delta: string }
  | { type: 'completed'; id: string; message: Record<string, unknown> }
  | { type: 'error'; id: string; code: string; message: string };
