export { SvcClient, EXPIRY_MARGIN_MS, type ChatStreamEvent, type SvcClientOptions, type Token } from './client';
export { ApiError, NetworkError } from './errors';
export { OPERATIONS } from './generated/methods';
export type { CallOptions, Input, OperationId, Output } from './types';
export type { components, operations, paths } from './generated/schema';
