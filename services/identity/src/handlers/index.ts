/** The identity service's handlers, by what they serve (the revocation watch is the server's feed). */
import { auditHandlers } from '../audit/handlers';
import type { IdentityDeps } from '../context';
import { parseOAuthProviders } from '../oidc';
import { accountLinkHandlers } from './account-links';
import { apiKeyHandlers } from './api-keys';
import { authHandlers } from './auth';
import { cliLoginHandlers } from './cli-login';
import { externalAuthHandlers } from './external-auth';
import { idempotencyClaimHandlers } from './idempotency-claims';
import { invitationHandlers } from './invitations';
import { llmSettingsHandlers } from './llm-settings';
import { modelHandlers } from './models';
import { networkHandlers } from './network';
import { secretHandlers } from './secrets';
import { teamHandlers } from './team';

/** The settings of sign-in with another issuer's token (OIDC_ISSUER, OIDC_AUDIENCE) and of OAuth (OAUTH_PROVIDERS). */
interface ExternalAuthSettings {
  oidcIssuer?: string;
  oidcAudience?: string;
  oauthProviders?: string;
}

export function identityHandlers(deps: IdentityDeps, settings: ExternalAuthSettings) {
  return {
    ...authHandlers(deps),
    ...apiKeyHandlers(deps),
    ...teamHandlers(deps),
    ...invitationHandlers(deps),
    ...accountLinkHandlers(deps),
    ...networkHandlers(deps),
    ...llmSettingsHandlers(deps),
    ...secretHandlers(deps),
    ...modelHandlers(deps),
    ...cliLoginHandlers(deps),
    ...auditHandlers(deps),
    ...idempotencyClaimHandlers(deps),
    ...externalAuthHandlers(deps, {
      exchange: settings.oidcIssuer ? { issuer: settings.oidcIssuer, audience: settings.oidcAudience ?? '' } : null,
      oauth: parseOAuthProviders(settings.oauthProviders),
    }),
  };
}
