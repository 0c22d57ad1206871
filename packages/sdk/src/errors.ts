/**
 * What the SDK throws: every error is a `SvcError` with `status`, `code`, `details` and `requestId` (the last three
 * from the API's error envelope). An answer with an error status is an `APIError`, of the class of its status
 * (`NotFoundError`, `RateLimitError`, ...); no answer at all is an `APIConnectionError` (`APITimeoutError` when the
 * call's `timeout` ran out). The classes and their names follow openai-node's.
 */
export class SvcError extends Error {
  override name = 'SvcError';
  constructor(
    message: string,
    /** The HTTP status; undefined when no answer came. */
    readonly status: number | undefined,
    /** The envelope's `error.code` (e.g. `RESOURCE_NOT_FOUND`), or `CONNECTION_ERROR` / `TIMEOUT`. */
    readonly code: string,
    readonly details: Record<string, unknown> = {},
    /** `X-Request-Id` of the answer, to quote to support. */
    readonly requestId: string | null = null,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/** The API answered with an error status. */
export class APIError extends SvcError {
  override name = 'APIError';
  declare readonly status: number;
  constructor(
    status: number,
    code: string,
    message: string,
    details: Record<string, unknown> = {},
    requestId: string | null = null,
    /** From `Retry-After`, when the API sent one (429, 503). */
    readonly retryAfterMs: number | null = null,
    /** The answer's headers. */
    readonly headers: Headers = new Headers(),
  ) {
    super(message, status, code, details, requestId);
  }

  /** The error of an answer: the class of its status. */
  static of(status: number, ...rest: ConstructorParameters<typeof APIError> extends [number, ...infer R] ? R : never): APIError {
    const Class = STATUS_CLASSES[status] ?? (status >= 500 ? InternalServerError : APIError);
    return new Class(status, ...rest);
  }
}

export class BadRequestError extends APIError {
  override name = 'BadRequestError';
}
export class AuthenticationError extends APIError {
  override name = 'AuthenticationError';
}
/** 402: the tenant's credits ran out (`INSUFFICIENT_CREDITS`). */
export class PaymentRequiredError extends APIError {
  override name = 'PaymentRequiredError';
}
export class PermissionDeniedError extends APIError {
  override name = 'PermissionDeniedError';
}
export class NotFoundError extends APIError {
  override name = 'NotFoundError';
}
export class ConflictError extends APIError {
  override name = 'ConflictError';
}
export class UnprocessableEntityError extends APIError {
  override name = 'UnprocessableEntityError';
}
export class RateLimitError extends APIError {
  override name = 'RateLimitError';
}
/** Any 5xx. */
export class InternalServerError extends APIError {
  override name = 'InternalServerError';
}

const STATUS_CLASSES: Record<number, typeof APIError> = {
  400: BadRequestError,
  401: AuthenticationError,
  402: PaymentRequiredError,
  403: PermissionDeniedError,
  404: NotFoundError,
  409: ConflictError,
  422: UnprocessableEntityError,
  429: RateLimitError,
};

/** No answer came: connection refused or reset, DNS, a body cut off. */
export class APIConnectionError extends SvcError {
  override name = 'APIConnectionError';
  constructor(message: string, cause?: unknown, code = 'CONNECTION_ERROR') {
    super(message, undefined, code, {}, null, { cause });
  }
}

/** No answer within the call's `timeout`. */
export class APITimeoutError extends APIConnectionError {
  override name = 'APITimeoutError';
  constructor(message = 'The request timed out.', cause?: unknown) {
    super(message, cause, 'TIMEOUT');
  }
}

/** Earlier names, kept for existing code: `ApiError` is `APIError`, `NetworkError` is `APIConnectionError`. */
export { APIError as ApiError, APIConnectionError as NetworkError };
