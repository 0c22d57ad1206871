/**
 * Webhook secrets and the keys they sign with (CONTRACT.md 5, 14). A secret of the Standard Webhooks form
 * `whsec_<base64>` keys the HMAC with the bytes the base64 decodes to, as the `standardwebhooks` libraries do with no
 * options; any other secret with its UTF-8 bytes, as every delivery before Standard Webhooks keying did. Which of the
 * two a stored secret uses is recorded beside it when it is set (`secretWhsec`), never guessed from its form later: a
 * registration whose `whsec_...` secret was set before keeps the UTF-8 keying its receiver verifies with.
 */
import type { SecretBox } from '@svc/kit';
import { isWhsec, keyOf } from '@svc/contracts/webhook-signature';
import type { WebhookDoc } from './collections';

export { generateSecret } from '@svc/contracts/webhook-signature';
/** How long a rotated-out secret keeps signing: default and most (hours). */
export const GRACE_HOURS = { default: 24, max: 168 } as const;

/** The stored fields of a secret being set now (create, PATCH, rotation). */
export function sealSecret(box: SecretBox, secret: string): Pick<WebhookDoc, 'secretSealed' | 'secretWhsec'> {
  return { secretSealed: box.encrypt(secret), secretWhsec: isWhsec(secret) };
}

/** The keys a registration signs with: its secret's, and the rotated-out one's until its grace period ends. */
export interface SigningKeys {
  current: Buffer;
  previous: { key: Buffer; untilMs: number } | null;
}

export function signingKeys(box: SecretBox, hook: WebhookDoc): SigningKeys {
  const prev = hook.previousSecret;
  return {
    current: keyOf(box.decrypt(hook.secretSealed), hook.secretWhsec === true),
    previous: prev ? { key: keyOf(box.decrypt(prev.sealed), prev.whsec), untilMs: Date.parse(prev.until) } : null,
  };
}

/**
 * The keys that sign an attempt made at `nowMs`: the grace period's end is an instant stored by the rotating replica
 * and compared with the delivering replica's clock, so clock skew between them moves it by that skew (seconds, in a
 * period of hours). A rotation with no grace stores no previous secret, so it takes effect without any clock.
 */
export function keysAt(keys: SigningKeys, nowMs: number): Buffer[] {
  return keys.previous && nowMs < keys.previous.untilMs ? [keys.current, keys.previous.key] : [keys.current];
}
