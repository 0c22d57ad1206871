import type { HttpInit, HttpReply, LlmTransport } from './http';
import { LlmError } from './types';

/** The shape of @svc/kit's `egressStream` (undici's request behind the egress guard). */
type GuardedSend = (url: string, init: HttpInit) => Promise<HttpReply>;

/**
 * Routes a provider's requests through the caller's egress guard (`egressStream` of @svc/kit) and turns its
 * refusals into LlmErrors: a refused address or scheme is `bad_request` (not retried: the settings are wrong),
 * a guard timeout is `timeout`. Other failures pass through for the provider's own retry rules.
 */
export function throughEgress(guarded: GuardedSend): LlmTransport {
  return async (url, init) => {
    try {
      return await guarded(url, init);
    } catch (err) {
      const e = err as { name?: string; reason?: string; message?: string };
      if (e?.name === 'EgressError') {
        if (e.reason === 'timeout') throw new LlmError('timeout', 'the LLM provider did not answer in time');
        throw new LlmError('bad_request', `the LLM base URL is not allowed: ${e.message ?? 'refused'}`, { code: `egress_${e.reason}` });
      }
      throw err;
    }
  };
}
