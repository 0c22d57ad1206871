import { field } from '@svc/kit';

/**
 * REQUIRE_VERIFIED_EMAIL (CONTRACT.md 13), read by identity (API-key creation) and the gateway (model calls): a user
 * who has not opened the verification link is refused both with 403 `email_not_verified`.
 */
export const requireVerifiedEmailField = field('REQUIRE_VERIFIED_EMAIL', 'bool', { default: 'false' });
