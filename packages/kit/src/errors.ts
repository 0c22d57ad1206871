import { status as GrpcStatus } from '@grpc/grpc-js';

/**
 * The closed set of error codes of the public API (spec part 7 plus CONTRACT.md section 2).
 * Services throw AppError; the gRPC layer carries code and details to the gateway, which maps them to HTTP.
 */
export const ERROR_CODES = {
  VALIDATION_ERROR: { http: 400, grpc: GrpcStatus.INVALID_ARGUMENT },
  UNAUTHORIZED: { http: 401, grpc: GrpcStatus.UNAUTHENTICATED },
  INSUFFICIENT_CREDITS: { http: 402, grpc: GrpcStatus.FAILED_PRECONDITION },
  FORBIDDEN: { http: 403, grpc: GrpcStatus.PERMISSION_DENIED },
  RESOURCE_NOT_FOUND: { http: 404, grpc: GrpcStatus.NOT_FOUND },
  METHOD_NOT_ALLOWED: { http: 405, grpc: GrpcStatus.UNIMPLEMENTED },
  CONFLICT: { http: 409, grpc: GrpcStatus.ALREADY_EXISTS },
  /** A one-time link's token that was used, revoked or expired (CONTRACT.md 13); `details.reason` names it. */
  GONE: { http: 410, grpc: GrpcStatus.FAILED_PRECONDITION },
  PAYLOAD_TOO_LARGE: { http: 413, grpc: GrpcStatus.INVALID_ARGUMENT },
  UNPROCESSABLE_ENTITY: { http: 422, grpc: GrpcStatus.FAILED_PRECONDITION },
  UNSUPPORTED_MEDIA_TYPE: { http: 415, grpc: GrpcStatus.INVALID_ARGUMENT },
  RATE_LIMIT_EXCEEDED: { http: 429, grpc: GrpcStatus.RESOURCE_EXHAUSTED },
  INTERNAL_ERROR: { http: 500, grpc: GrpcStatus.INTERNAL },
  SERVICE_UNAVAILABLE: { http: 503, grpc: GrpcStatus.UNAVAILABLE },
  GATEWAY_TIMEOUT: { http: 504, grpc: GrpcStatus.DEADLINE_EXCEEDED },
} as const;

export type ErrorCode = keyof typeof ERROR_CODES;
export type ErrorDetails = Record<string, unknown>;
export interface FieldError {
  field: string;
  message: string;
}

/**
 * What an AppError was mapped from, for the logs only (never sent to a client): the gRPC status a service answered,
 * or the error the gateway caught.
 */
export type ErrorCause = { grpcCode: string; grpcMessage: string } | Error;

export class AppError extends Error {
  declare readonly cause?: ErrorCause;

  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details: ErrorDetails = {},
    options?: { cause?: ErrorCause },
  ) {
    super(message, options);
    this.name = 'AppError';
  }

  get httpStatus(): number {
    return ERROR_CODES[this.code].http;
  }
}

export const errors = {
  validation: (fields: FieldError[], message = 'Invalid request parameters') => new AppError('VALIDATION_ERROR', message, { fields }),
  badRequest: (reason: string, message: string, extra: ErrorDetails = {}) =>
    new AppError('VALIDATION_ERROR', message, { reason, ...extra }),
  unauthorized: (message = 'Authentication required') => new AppError('UNAUTHORIZED', message),
  forbidden: (message = 'Not allowed', details: ErrorDetails = {}) => new AppError('FORBIDDEN', message, details),
  /** A scope-limited credential without the scope a route needs. */
  missingScope: (scope: string) => new AppError('FORBIDDEN', `Missing scope ${scope}`, { reason: 'missing_scope', requiredScope: scope }),
  /** A scope-limited credential where only one without a scope list may act (CONTRACT.md 3). */
  unscopedRequired: () =>
    new AppError('FORBIDDEN', 'This needs a credential without a scope list', { reason: 'unscoped_credential_required' }),
  notFound: (resource: string, id: string) => new AppError('RESOURCE_NOT_FOUND', `${resource} not found`, { resource, id }),
  conflict: (message: string, details: ErrorDetails = {}) => new AppError('CONFLICT', message, details),
  gone: (reason: string, message: string) => new AppError('GONE', message, { reason }),
  unavailable: (message: string, details: ErrorDetails = {}) => new AppError('SERVICE_UNAVAILABLE', message, details),
  internal: () => new AppError('INTERNAL_ERROR', 'Internal server error'),
};

export function isAppError(err: unknown): err is AppError {
  return err instanceof AppError;
}

/** The log fields of what an error was mapped from: the gRPC status, or the error caught (name, message, stack). */
export function causeFields(err: unknown): { cause?: Record<string, unknown> } {
  const cause = isAppError(err) ? err.cause : err;
  if (!cause) return {};
  if (cause instanceof Error) return { cause: { type: cause.name, message: cause.message, stack: cause.stack } };
  return { cause: cause as Record<string, unknown> };
}
