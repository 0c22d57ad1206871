import { AppError } from '@svc/kit';
import sjson from 'secure-json-parse';

const MAX_DEPTH = 64;
const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false });

/** JSON is UTF-8 (RFC 8259): bytes that are not are refused, never silently replaced with U+FFFD and stored. */
export function decodeUtf8(body: Buffer): string {
  try {
    return utf8.decode(body);
  } catch {
    throw new AppError('VALIDATION_ERROR', 'Request body is not valid UTF-8', { reason: 'invalid_utf8' });
  }
}

/**
 * JSON bodies: refuses nesting deeper than 64 before parsing (a deep array can exhaust the stack) and
 * refuses `__proto__` / `constructor.prototype` keys (prototype pollution). Both are 400s, never 500s.
 */
export function parseJsonBody(body: string): unknown {
  // No body at all (a client that always sends `Content-Type: application/json`): fine for a route that takes
  // none; a route that needs one refuses it in validation ("body must be object").
  if (body.length === 0) return undefined;
  let depth = 0;
  let inString = false;
  for (let i = 0; i < body.length; i++) {
    const ch = body.charCodeAt(i);
    if (inString) {
      if (ch === 92 /* \ */) i++;
      else if (ch === 34 /* " */) inString = false;
    } else if (ch === 34) inString = true;
    else if (ch === 123 || ch === 91 /* { [ */) {
      if (++depth > MAX_DEPTH)
        throw new AppError('VALIDATION_ERROR', `JSON nested deeper than ${MAX_DEPTH} levels`, { reason: 'too_deep' });
    } else if (ch === 125 || ch === 93) depth--;
  }
  try {
    return sjson.parse(body, undefined, { protoAction: 'error', constructorAction: 'error' });
  } catch (err) {
    const poisoned = err instanceof SyntaxError && /prototype/i.test(err.message);
    throw new AppError('VALIDATION_ERROR', poisoned ? 'Forbidden key in JSON body' : 'Malformed JSON body', {
      reason: poisoned ? 'forbidden_key' : 'malformed_json',
    });
  }
}
