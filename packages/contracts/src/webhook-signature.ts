/**
 * Standard Webhooks signing (https://www.standardwebhooks.com), shared by the webhooks service's deliveries and the
 * CLI's `svc listen`, so a receiver verifies both alike. Node's crypto only: the CLI bundles this file alone.
 *
 * A secret of the form `whsec_<base64>` keys the HMAC with the bytes the base64 decodes to, as the
 * `standardwebhooks` libraries do with no options; any other secret with its UTF-8 bytes (CONTRACT.md 14).
 */
import { createHmac, randomBytes } from 'node:crypto';

export const WHSEC_PREFIX = 'whsec_';
/** Standard Webhooks: secrets of 24 to 64 bytes; the ones generated here have 32. */
export const WHSEC_BYTES = { min: 24, max: 64, generated: 32 } as const;

const BASE64 = /^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/;

/** A new secret, `whsec_<base64 of 32 random bytes>`. */
export function generateSecret(): string {
  return WHSEC_PREFIX + randomBytes(WHSEC_BYTES.generated).toString('base64');
}

/**
 * Whether a secret is of the Standard Webhooks form `whsec_<base64>`: the prefix, then canonical base64 of 24 to 64
 * bytes (what Standard Webhooks libraries decode). Any other secret, one that merely starts with `whsec_` included, is
 * "any other secret" of CONTRACT.md 14 and keeps its UTF-8 bytes, as every secret did before Standard Webhooks keying.
 */
export function isWhsec(secret: string): boolean {
  if (!secret.startsWith(WHSEC_PREFIX)) return false;
  const encoded = secret.slice(WHSEC_PREFIX.length);
  if (!BASE64.test(encoded)) return false;
  const bytes = Buffer.from(encoded, 'base64').length;
  return bytes >= WHSEC_BYTES.min && bytes <= WHSEC_BYTES.max;
}

/** The HMAC key of a secret as stored: its decoded bytes when set as a Standard Webhooks secret, else its UTF-8 bytes. */
export function keyOf(secret: string, whsec: boolean): Buffer {
  return whsec ? Buffer.from(secret.slice(WHSEC_PREFIX.length), 'base64') : Buffer.from(secret, 'utf8');
}

/**
 * Standard Webhooks signatures: `v1,` + base64 HMAC-SHA256 of `${id}.${timestamp}.${body}` under each key (the
 * current secret's first), space-separated.
 */
export function signatures(keys: Buffer[], id: string, timestamp: number, body: string): string {
  return keys.map((key) => `v1,${createHmac('sha256', key).update(`${id}.${timestamp}.${body}`).digest('base64')}`).join(' ');
}

/**
 * The headers of one attempt of a delivery: `webhook-id` (the event id, the same on every retry),
 * `webhook-timestamp` (Unix seconds) and `webhook-signature` under each of `keys`.
 */
export function signedHeaders(keys: Buffer[], eventId: string, body: string, userAgent: string, now = Date.now()): Record<string, string> {
  const timestamp = Math.floor(now / 1000);
  return {
    'content-type': 'application/json',
    'user-agent': userAgent,
    'webhook-id': eventId,
    'webhook-timestamp': String(timestamp),
    'webhook-signature': signatures(keys, eventId, timestamp, body),
  };
}
