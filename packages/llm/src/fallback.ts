/**
 * Model fallbacks (CONTRACT.md 9): a tenant's main model and its ordered fallbacks as one provider. A call that fails
 * before its first event (429, 5xx, a timeout, a refused or cut connection) moves on to the next model; once a model
 * has started answering, its stream is the answer, and a failure after that is thrown (never a silent end, never a
 * second model's text appended to the first's). Each deployment has a circuit breaker: an open one is skipped with no
 * attempt at all. The last model that can be tried retries as a single model does, honouring `Retry-After` up to
 * MAX_RETRY_AFTER_MS (after a 429, a 5xx or a lost connection; not after a timeout); a model followed by another is
 * not retried (the next model is its retry).
 */
import { domainMetrics } from '@svc/contracts/metrics';
import { backoffMs, MAX_RETRY_AFTER_MS, PROVIDER_LABEL } from './core';
import type { CircuitBreaker } from './breaker';
import { reusedProvider } from './provider';
import {
  type LlmEmbedRequest,
  type LlmEmbedResult,
  LlmError,
  type LlmEvent,
  type LlmProvider,
  type LlmProviderKind,
  type LlmRequest,
  type LlmSettings,
  type LlmStreamOptions,
} from './types';

/** The model that answered a call: recorded on the reply or step and billed (llm.usage carries it). */
export interface ServedModel {
  provider: LlmProviderKind;
  model: string;
  /** 0 for the main model, i for the i-th fallback. */
  index: number;
}

export interface ChainStreamOptions extends LlmStreamOptions {
  /** Called once, just before the first event of the model that serves the call. */
  onServed?: (served: ServedModel) => void;
}

export interface ModelChainOptions {
  /** Breaker shared by the process; absent: no breaker. */
  breaker?: CircuitBreaker;
  /** Who the circuits belong to (the tenant id): breakers are per (tenant, provider, model, base URL). */
  scope: string;
  /** Retries of the last model that can be tried (before any of its reply arrived). Default 2. */
  maxRetries?: number;
  /** Every failed or skipped attempt, for logs and metrics. */
  onAttemptFailed?: (attempt: { provider: LlmProviderKind; model: string; index: number; error: LlmError; skipped: boolean }) => void;
}

export interface ModelChain extends LlmProvider {
  stream(request: LlmRequest, options?: ChainStreamOptions): AsyncIterable<LlmEvent>;
  embed(request: LlmEmbedRequest, options?: ChainStreamOptions): Promise<LlmEmbedResult>;
}

/** Errors that say the model (not the request) failed: the next one may answer. */
function movesOn(error: LlmError): boolean {
  return error.kind === 'rate_limited' || error.kind === 'unavailable' || error.kind === 'timeout' || error.kind === 'protocol';
}

function asLlmError(err: unknown): LlmError {
  return err instanceof LlmError ? err : new LlmError('unavailable', 'the model call failed');
}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<boolean> {
  return new Promise((resolve) => {
    if (signal?.aborted) return resolve(false);
    const timer = setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve(true);
    }, ms);
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * The breaker key of a deployment: entries that differ only by base URL (or, for Bedrock without one, by region) are
 * different deployments.
 */
export function breakerKey(scope: string, s: Pick<LlmSettings, 'provider' | 'model' | 'baseUrl' | 'region'>): string {
  const key = `${scope}|${s.provider}|${s.model ?? ''}|${(s.baseUrl ?? '').replace(/\/+$/, '')}`;
  return s.region ? `${key}|${s.region}` : key;
}

/**
 * One provider over `candidates` (the main model first, then its fallbacks, each complete settings). A request's
 * `model` applies to the main model only (an agent's own model); fallbacks use their own.
 */
export function createModelChain(candidates: LlmSettings[], options: ModelChainOptions): ModelChain {
  if (candidates.length === 0) throw new LlmError('bad_request', 'no model to call');
  const maxRetries = options.maxRetries ?? 2;
  const { breaker, scope } = options;
  const providers: Array<LlmProvider | LlmError | undefined> = [];
  const providerAt = (i: number): LlmProvider | LlmError => {
    if (providers[i] === undefined) {
      try {
        // Retries are run here, attempt by attempt, so that the breaker sees each one.
        providers[i] = reusedProvider({ ...candidates[i], maxRetries: 0 });
      } catch (err) {
        providers[i] = asLlmError(err);
      }
    }
    return providers[i]!;
  };

  /**
   * One call over the candidates: `call` on each in turn until one yields its first item (then that one's items are
   * the answer). `firstModel` is the request's model, for the main model only.
   */
  async function* attempts<E>(
    firstModel: string | undefined,
    call: (provider: LlmProvider, model: string, index: number) => AsyncIterable<E>,
    streamOptions: ChainStreamOptions,
  ): AsyncGenerator<E> {
    const { signal, onServed } = streamOptions;
    const models = candidates.map((c, i) => (i === 0 ? (firstModel ?? c.model ?? '') : (c.model ?? '')));
    const keys = candidates.map((c, i) => breakerKey(scope, { ...c, model: models[i] }));
    let lastError: LlmError | undefined;
    let skipped: LlmError | undefined;
    let tried = 0;
    // A failure that opens a circuit is counted (svc_llm_breaker_opened_total: the breaker-open alert).
    const unavailable = (i: number) => {
      if (breaker?.failure(keys[i])) domainMetrics.breakerOpened.inc({ provider: candidates[i].provider });
    };
    const fail = (i: number, error: LlmError, wasSkipped: boolean) =>
      options.onAttemptFailed?.({ provider: candidates[i].provider, model: models[i], index: i, error, skipped: wasSkipped });

    for (let i = 0; i < candidates.length; i++) {
      const c = candidates[i];
      const key = keys[i];
      let admission = breaker ? breaker.admit(key) : ({ allowed: true, trial: false } as const);
      if (!admission.allowed) {
        skipped = new LlmError(
          'unavailable',
          `${PROVIDER_LABEL[c.provider]} model ${models[i]} is skipped for now: it failed repeatedly (circuit open)`,
          { provider: c.provider, code: 'circuit_open', retryAfterMs: admission.retryAfterMs },
        );
        fail(i, skipped, true);
        continue;
      }
      const provider = providerAt(i);
      if (provider instanceof LlmError) {
        // Settings that cannot work (a fallback without its key): tried no further, says nothing of the model.
        breaker?.release(key);
        lastError = provider;
        fail(i, provider, false);
        continue;
      }
      for (let attempt = 0; ; attempt++) {
        tried++;
        let started = false;
        try {
          for await (const event of call(provider, models[i], i)) {
            if (!started) {
              started = true;
              breaker?.success(key);
              onServed?.({ provider: c.provider, model: models[i], index: i });
            }
            yield event;
          }
          return;
        } catch (err) {
          const error = asLlmError(err);
          if (started) {
            // The answer had begun: no other model takes over (its text would be appended to this one's).
            if (movesOn(error)) unavailable(i);
            throw error;
          }
          if (error.kind === 'cancelled' || signal?.aborted || !movesOn(error)) {
            breaker?.release(key);
            throw error;
          }
          unavailable(i);
          lastError = error;
          fail(i, error, false);
          // The next model is this one's retry; the last one that can be tried retries itself.
          const later = keys.slice(i + 1).some((k) => !breaker || breaker.wouldAdmit(k));
          // A model that timed out or spoke garbage is not waited on again (each try would cost the whole timeout).
          const again = error.kind === 'rate_limited' || error.kind === 'unavailable';
          if (later || !again || attempt >= maxRetries) break;
          const delay = error.retryAfterMs ?? backoffMs(attempt);
          if (delay > MAX_RETRY_AFTER_MS) break;
          if (!(await sleep(delay, signal))) throw new LlmError('cancelled', 'the request was cancelled', { provider: c.provider });
          admission = breaker ? breaker.admit(key) : admission;
          if (!admission.allowed) break;
        }
      }
    }
    if (lastError && tried > 0 && candidates.length === 1) throw lastError;
    if (lastError) {
      const of = candidates.length > 1 ? ` (${tried} attempt${tried === 1 ? '' : 's'} on ${candidates.length} models)` : '';
      throw new LlmError(lastError.kind, `${lastError.message}${of}`, {
        status: lastError.status,
        retryAfterMs: lastError.retryAfterMs ?? skipped?.retryAfterMs,
        requestId: lastError.requestId,
        code: lastError.code,
        provider: lastError.provider,
      });
    }
    throw skipped!;
  }

  const stream = (request: LlmRequest, options: ChainStreamOptions = {}) =>
    attempts(request.model, (p, model, i) => p.stream(i === 0 ? request : { ...request, model }, { signal: options.signal }), options);

  /** Embeddings on the first candidate that answers, moving on as a stream does before its first event. */
  async function embed(request: LlmEmbedRequest, options: ChainStreamOptions = {}): Promise<LlmEmbedResult> {
    const embedOn = async function* (p: LlmProvider, model: string, i: number) {
      if (!p.embed)
        throw new LlmError('bad_request', `${PROVIDER_LABEL[candidates[i].provider]} model ${model} has no embeddings`, {
          provider: candidates[i].provider,
          code: 'embeddings_not_supported',
        });
      yield await p.embed({ ...request, model }, { signal: options.signal });
    };
    for await (const result of attempts(request.model, embedOn, options)) return result;
    throw new LlmError('protocol', 'the model answered no embeddings');
  }

  return { stream, embed };
}
