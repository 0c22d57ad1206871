/**
 * Embeddings on a model (CONTRACT.md 12, POST /v1/embeddings): the model resolved as a REST chat call's (a catalogue
 * name, else the default model), its most possible cost reserved (the inputs' token bound at the dearest input price
 * that may serve) and its record stored pending as a reply's (with the key's concurrency place and the tenant's cap of
 * replies in progress) before the provider is called, the call routed as a reply's (entries by weight; no fallbacks),
 * then billed once at the serving model's input price with its request-log entry (origin `v1`). A crash mid-call
 * leaves the record, which the sweep bills (its reserved input tokens) once its lease has run out.
 */
import { AppError, type AuthedContext, type CallContext, errors, idempotent, isAppError } from '@svc/kit';
import { type CallHold, promptTokenBound, TOKENIZE_MAX_BYTES, authed } from '@svc/contracts';
import { type CallPlan, isLlmError, planHold } from '@svc/llm';
import type { chatV1 } from '@svc/proto';
import { replyCall, restPlan } from '../model-choice';
import { admitReply, pendingReply } from '../start-reply';
import type { CallDeps } from './shared';

/** OpenAI's own bound on the inputs of one embeddings request. */
export const EMBED_MAX_INPUTS = 2048;

/**
 * An upper bound on the inputs' tokens on any model of the plan: each input's bound under each model's tokenizer
 * (its bytes where none is known), the largest; past TOKENIZE_MAX_BYTES in all, their bytes (promptTokenBound's cap).
 */
function inputTokenBound(inputs: string[] | number[][], plan: CallPlan): number {
  // Token arrays are the tokens themselves.
  if (isTokenArrays(inputs)) return inputs.reduce((n, t) => n + t.length, 0);
  const bytes = inputs.reduce((n, s) => n + Buffer.byteLength(s, 'utf8'), 0);
  if (bytes > TOKENIZE_MAX_BYTES) return bytes;
  const models = new Set([...plan.primary, ...plan.fallbacks].map((c) => c.settings.model ?? ''));
  return Math.max(0, ...[...models].map((m) => inputs.reduce((n, s) => n + promptTokenBound(s, m), 0)));
}

const isTokenArrays = (inputs: string[] | number[][]): inputs is number[][] => typeof inputs[0] !== 'string';

/** The request's inputs: its texts, else its token arrays (OpenAI's `input` as number[][]), checked. */
function inputsOf(req: chatV1.EmbedRequest): string[] | number[][] {
  if (req.input.length && req.tokenInput.length)
    throw errors.validation([{ field: 'input', message: 'must hold either strings or token arrays, not both' }]);
  const inputs = req.input.length ? req.input : req.tokenInput.map((t) => t.tokens);
  if (inputs.length === 0 || inputs.length > EMBED_MAX_INPUTS)
    throw errors.validation([{ field: 'input', message: `must hold 1 to ${EMBED_MAX_INPUTS} inputs` }]);
  if (inputs.some((i) => i.length === 0)) throw errors.validation([{ field: 'input', message: 'must not hold an empty input' }]);
  if (req.tokenInput.some((t) => t.tokens.some((id) => id < 0)))
    throw errors.validation([{ field: 'input', message: 'token ids must not be negative' }]);
  return inputs;
}

export function embedCall(deps: CallDeps) {
  const { peers, replies } = deps;

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
    const inputs = inputsOf(req);
    if (req.dimensions !== undefined && req.dimensions < 1)
      throw errors.validation([{ field: 'dimensions', message: 'must be at least 1' }]);

    const resolved = await restPlan(peers, token, auth.tid, deps.pricing, req.model, '');
    // The name's own entries (or the default model) only: the default model's fallbacks are chat models.
    const plan: CallPlan = { ...resolved.plan, fallbacks: [] };
    const { llm } = resolved;
    const inputTokens = inputTokenBound(inputs, plan);
    const keySource = plan.primary[0]?.meta.entryId ? 'tenant' : (llm?.keySource ?? 'tenant');
    // The call's record, as a reply's: stored pending (its lease beaten while it runs) before the provider is called,
    // taking the key's concurrency place and counting in the tenant's replies in progress; its id is the call id.
    const record = pendingReply(auth, replies.newLease(), {
      sessionId: '',
      projectId: '',
      ephemeral: true,
      embeddings: true,
      call: replyCall(c, plan, keySource, {
        promptChars: inputTokens * 4,
        projectId: '',
        agentId: '',
        origin: 'v1',
        requestId,
        endUser: req.endUser,
      }),
    });
    const hold: CallHold = {
      callId: record.id,
      tokens: inputTokens,
      source: 'chat_reply',
      sourceId: record.id,
      model: plan.name,
      price: planHold(plan).price,
      inputTokens,
      outputTokens: 0,
    };
    await admitReply(deps, c, { reply: record, hold });
    try {
      const { result, servedModel } = await replies.embed(auth.tid, record, plan, {
        input: inputs,
        ...(req.dimensions !== undefined ? { dimensions: req.dimensions } : {}),
      });
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
