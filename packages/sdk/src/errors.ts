/** An error answer of the API, typed: the envelope's code, message and details, the request id, the HTTP status. */
export class ApiError extends Error {
  override readonly name = 'ApiError';
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly details: Record<string, unknown> = {},
    readonly requestId: string | null = null,
    /** From Retry-After, when the API sent one (429, 503). */
    readonly retryAfterMs: number | null = null,
  ) {
    super(message);
  }
}

/** The request never got an answer (connection refused, reset, DNS): no status, no request id. */
export class NetworkError extends Error {
  override readonly name = 'NetworkError';
  constructor(
    message: string,
    override readonly cause?: unknown,
  ) {
    super(message);
  }
}
