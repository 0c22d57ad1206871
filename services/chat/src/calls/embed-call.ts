/**
 * Embeddings on a model (CONTRACT.md 12, POST /v1/embeddings): the model resolved as a REST chat call's (a catalogue
 * name, else the default model), its most possible cost reserved (the inputs' token bound at the dearest input price
 * that may serve), the call routed as a reply's (entries by weight; no fallbacks), then billed once at the serving
 * model's input price with its request-log entry (origin `v1`).
 */
import { AppError, type AuthedContext, authed, type CallContext, errors, idempotent, isAppError, newId } from '@svc/kit';
import { type CallHold, promptTokenBound, TOKENIZE_MAX_BYTES } from '@svc/contracts';
import { type CallPlan, isLlmError, planHold } from '@svc/llm';
import type { chatV1 } from '@svc/proto';
import { replyCall, restPlan } from '../model-choice';
import type { CallDeps } from './shared';

/** OpenAI's own bound on the inputs of one embeddings request. */
export const EMBED_MAX_INPUTS = 2048;

/**
 * An upper bound on the inputs' tokens on any model of the plan: each input's bound under each model's tokenizer
 * (its bytes where none is known), the largest; past TOKENIZE_MAX_BYTES in all, their bytes (promptTokenBound's cap).
 */
function inputTokenBound(inputs: string[], plan: CallPlan): number {
  const bytes = inputs.reduce((n, s) => n + Buffer.byteLength(s, 'utf8'), 0);
  if (bytes > TOKENIZE_MAX_BYTES) return bytes;
  const models = new Set([...plan.primary, ...plan.fallbacks].map((c) => c.settings.model ?? ''));
  return Math.max(0, ...[...models].map((m) => inputs.reduce((n, s) => n + promptTokenBound(s, m), 0)));
}

export function embedCall(deps: CallDeps) {
  const { peers, replies, credits } = deps;

  return {
    /**
     * Once per Idempotency-Key: the answer is kept once the call ends. A call whose process died before its end is
     * not made again (the provider may have been called): a retry with its key answers that it was interrupted.
     */
    async embed(req: chatV1.EmbedRequest, ctx: CallContext): Promise<chatV1.EmbedResponse> {
      const c = authed(ctx, 'llm:use');
      const scope = { tenantId: c.auth.tid, operation: 'embed', key: ctx.idempotencyKey, body: req };
      return idempotent(deps.store, scope, () => embedOnce(c, ctx.requestId, req), {
        abandoned: interrupted,
        maxAnswerChars: MAX_KEPT_ANSWER_CHARS,
      });
    },
  };

  async function embedOnce(c: AuthedContext, requestId: string, req: chatV1.EmbedRequest): Promise<chatV1.EmbedResponse> {
    const { auth, token } = c;
    if (req.input.length === 0 || req.input.length > EMBED_MAX_INPUTS)
      throw errors.validation([{ field: 'input', message: `must hold 1 to ${EMBED_MAX_INPUTS} inputs` }]);
    if (req.input.some((s) => s === '')) throw errors.validation([{ field: 'input', message: 'must not hold an empty string' }]);
    if (req.dimensions !== undefined && req.dimensions < 1)
      throw errors.validation([{ field: 'dimensions', message: 'must be at least 1' }]);

    const resolved = await restPlan(peers, token, auth.tid, deps.pricing, req.model, '');
    // The name's own entries (or the default model) only: the default model's fallbacks are chat models.
    const plan: CallPlan = { ...resolved.plan, fallbacks: [] };
    const { llm } = resolved;
    const callId = newId('emb');
    const inputTokens = inputTokenBound(req.input, plan);
    const hold: CallHold = {
      callId,
      tokens: inputTokens,
      source: 'chat_reply',
      sourceId: callId,
      model: plan.name,
      price: planHold(plan).price,
      inputTokens,
      outputTokens: 0,
    };
    const keySource = plan.primary[0]?.meta.entryId ? 'tenant' : (llm?.keySource ?? 'tenant');
    const call = replyCall(c, plan, keySource, {
      promptChars: inputTokens * 4,
      projectId: '',
      agentId: '',
      origin: 'v1',
      requestId,
      endUser: req.endUser,
    });
    await credits.reserve(c, hold);
    // Unary: the call runs to its end (each attempt bounded by CHAT_LLM_TIMEOUT_MS) and is billed whoever waits.
    const signal = new AbortController().signal;
    try {
      const { result, servedModel } = await replies.embed(
        auth.tid,
        callId,
        call,
        plan,
        { input: req.input, ...(req.dimensions !== undefined ? { dimensions: req.dimensions } : {}) },
        signal,
      );
      return {
        model: plan.name,
        servedModel,
        data: result.vectors.map((values) => ({ values })),
        inputTokens: result.inputTokens,
      };
    } catch (err) {
      if (isAppError(err) || !isLlmError(err)) throw err;
      // The provider refused the request itself (a model without embeddings, dimensions it cannot make): 400;
      // every model failed: 503, as a failed chat completion.
      if (err.kind === 'bad_request')
        throw errors.badRequest((err.code ?? 'llm_bad_request').toLowerCase(), err.message, { param: 'model' });
      throw new AppError('SERVICE_UNAVAILABLE', err.message, { reason: `llm_${err.kind}` });
    }
  }
}

/** Vectors past this, as JSON, are not kept under an Idempotency-Key (as the gateway keeps answers up to 1 MB). */
const MAX_KEPT_ANSWER_CHARS = 4 * 1024 * 1024;

/** The answer to a retry of a call its process left unfinished, as a reply cut by a crash is failed. */
const interrupted = () =>
  new AppError('SERVICE_UNAVAILABLE', 'The call with this Idempotency-Key was interrupted (the chat service stopped) before it finished', {
    reason: 'reply_interrupted',
  });
