import type { FastifyReply } from 'fastify';
import { AppError, type CallOptions } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import type { GatewayDeps } from '../deps';
import { KEY_RATE_WINDOW_S } from '../plugins/authenticate';
import type { Principal } from './principal';

/**
 * The key view's live usage (CONTRACT.md 8): requests from the gateways' shared rate counter (Redis, else this
 * gateway's), tokens and credits from billing, which counts them as it records each model call's usage.
 */
export async function keyUsageOf(deps: GatewayDeps, keys: identityV1.ApiKey[], call: CallOptions) {
  if (!keys.length) return [];
  const [requests, billed] = await Promise.all([
    Promise.all(
      keys.map((k) => deps.limiter.peek(`k:${k.id}`, k.limits?.requestsPerMinute ? KEY_RATE_WINDOW_S : deps.config.rateLimitWindowS)),
    ),
    deps.clients.billing.getKeyUsage({ apiKeyIds: keys.map((k) => k.id) }, call),
  ]);
  return keys.map((k, i) => {
    const u = billed.usages[i];
    return {
      requestsThisMinute: requests[i],
      tokensThisMinute: u?.tokensThisMinute ?? 0,
      creditsThisPeriod: (k.limits?.creditBudget?.period === 'month' ? u?.creditsThisMonth : u?.creditsTotal) ?? 0,
    };
  });
}

/**
 * An API key's tokensPerMinute, before a request that starts model calls (a chat message, an agent run): refused
 * with 429 once the tokens billing recorded for the key in its current minute reached the limit. Usage is recorded
 * when a call ends, so calls already running may take the minute past the limit; new ones then wait for the next.
 */
export async function assertKeyTokens(deps: GatewayDeps, principal: Principal, call: CallOptions, reply: FastifyReply): Promise<void> {
  const limit = principal.limits?.tokensPerMinute;
  if (!limit) return;
  const res = await deps.clients.billing.getKeyUsage({ apiKeyIds: [principal.credentialId] }, call);
  const used = res.usages[0]?.tokensThisMinute ?? 0;
  if (used < limit) return;
  reply.header('Retry-After', Math.min(60, Math.max(1, res.minuteResetsInS)));
  throw new AppError('RATE_LIMIT_EXCEEDED', "The key's tokens per minute are used up; retry in the next minute", {
    reason: 'tokens_per_minute',
    limit,
  });
}

/** A pass-through call's place lapses after this when its gateway died holding it (the reservation's own expiry). */
export const KEY_SLOT_LEASE_MS = 10 * 60_000;

/**
 * A place among the API key's `concurrency` calls of `kind` in progress (CONTRACT.md 8), for the model calls the
 * gateway makes itself (pass-through): taken where it is checked, shared by every gateway through the rate limit
 * store (Redis when REDIS_URL is set). Refused with 429 `key_concurrency`. Returns the release (once), or null when
 * the key has no concurrency limit.
 */
export async function takeKeySlot(
  deps: GatewayDeps,
  principal: Principal,
  kind: string,
  id: string,
  reply: FastifyReply,
): Promise<(() => Promise<void>) | null> {
  const limit = principal.type === 'api_key' ? principal.limits?.concurrency : undefined;
  if (!limit) return null;
  const key = `${kind}:k:${principal.credentialId}`;
  if (!(await deps.limiter.takeSlot(key, id, limit, KEY_SLOT_LEASE_MS))) {
    reply.header('Retry-After', 1);
    throw new AppError('RATE_LIMIT_EXCEEDED', `This API key may have at most ${limit} calls in progress at once; retry when one ends`, {
      reason: 'key_concurrency',
      limit,
      retryAfterS: 1,
    });
  }
  let released = false;
  return async () => {
    if (released) return;
    released = true;
    await deps.limiter.releaseSlot(key, id);
  };
}
