export {
  SvcClient,
  EXPIRY_MARGIN_MS,
  DEFAULT_MAX_RETRIES,
  DEFAULT_TIMEOUT_MS,
  type ChatStreamEvent,
  type SvcClientOptions,
  type Token,
  type V1ResponseBody,
  type V1ResponseEvent,
} from './client';
export {
  SvcError,
  APIError,
  BadRequestError,
  AuthenticationError,
  PaymentRequiredError,
  PermissionDeniedError,
  NotFoundError,
  ConflictError,
  UnprocessableEntityError,
  RateLimitError,
  InternalServerError,
  APIConnectionError,
  APITimeoutError,
  ApiError,
  NetworkError,
} from './errors';
export { PagedList, type Page } from './pagination';
export type { SseEvent } from './sse';
export { OPERATIONS } from './generated/methods';
export { RESOURCE_METHODS, type Resources } from './generated/resources';
export type * from './generated/resources';
export type { Body, CallOptions, Input, Item, OperationId, Output, Query, RequestOptions, StreamEvent, StreamOptions } from './types';
export type { components, operations, paths } from './generated/schema';
