import { LlmError } from './types';

type Fetch = (input: string | URL, init?: RequestInit) => Promise<Response>;

/**
 * Routes a provider's requests through the caller's egress guard (`egressFetch` of @svc/kit) and turns its
 * refusals into LlmErrors: a refused address or scheme is `bad_request` (not retried: the settings are wrong),
 * a guard timeout is `timeout`. Other failures pass through for the provider's own retry rules.
 */
export function throughEgress(guarded: Fetch): typeof fetch {
  return (async (input: Parameters<typeof fetch>[0], init?: RequestInit) => {
    const url = input instanceof Request ? input.url : String(input);
    try {
      return await guarded(
        url,
        input instanceof Request ? { method: input.method, headers: input.headers, body: input.body, ...init } : init,
      );
    } catch (err) {
      const e = err as { name?: string; reason?: string; message?: string };
      if (e?.name === 'EgressError') {
        if (e.reason === 'timeout') throw new LlmError('timeout', 'the LLM provider did not answer in time');
        throw new LlmError('bad_request', `the LLM base URL is not allowed: ${e.message ?? 'refused'}`, { code: `egress_${e.reason}` });
      }
      throw err;
    }
  }) as typeof fetch;
}
