import type { FastifyError } from 'fastify';
import { AppError } from '@svc/kit';
import { fieldErrors } from './validation';

/** Request bodies: 1 MiB (CONTRACT.md 6). */
export const BODY_LIMIT = 1024 * 1024;

/**
 * Framework and transport errors -> AppError. Unknown errors are hidden behind a 500 that keeps them as its cause
 * (logged where the 500 is sent).
 */
export function toAppError(err: FastifyError | AppError, bodyLimit = BODY_LIMIT): AppError {
  if (err instanceof AppError) return err;
  if (err.validation) {
    return new AppError('VALIDATION_ERROR', 'Invalid request parameters', {
      fields: fieldErrors(err.validation as never, err.validationContext ?? 'body'),
    });
  }
  switch (err.code) {
    case 'FST_ERR_CTP_BODY_TOO_LARGE':
      return new AppError('PAYLOAD_TOO_LARGE', `Request body is larger than ${bodyLimit} bytes`, { limit: bodyLimit });
    case 'FST_ERR_CTP_INVALID_MEDIA_TYPE':
      return new AppError('UNSUPPORTED_MEDIA_TYPE', 'Request bodies must be application/json', { reason: 'unsupported_media_type' });
    case 'FST_ERR_CTP_EMPTY_JSON_BODY':
      return new AppError('VALIDATION_ERROR', 'Request body is empty', { reason: 'empty_body' });
  }
  if (err.statusCode && err.statusCode >= 400 && err.statusCode < 500) {
    return new AppError('VALIDATION_ERROR', 'Malformed request', { reason: 'malformed_request' });
  }
  return new AppError('INTERNAL_ERROR', 'Internal server error', {}, { cause: err });
}
