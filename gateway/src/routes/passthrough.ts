/**
 * `/v1/passthrough/:provider/*` (CONTRACT.md 9): the provider endpoints the platform does not model (embeddings,
 * moderations, audio, images) forwarded with @fastify/http-proxy to the tenant's own configured provider, with the
 * tenant's stored key put in and the caller's credential never passed on. API keys only, scope `llm:passthrough`;
 * the egress guard applies when the connection opens; request and response sizes are capped; every request counts
 * against the key's rate limits.
 *
 * Metering (CONTRACT.md 8, 12): a POST (PUT, PATCH) is a model call. It takes a place among the key's concurrent
 * calls and, streamed, among the tenant's open streams; its most possible cost is reserved before it leaves (the
 * prompt's token bound plus its output bound, put in when the body has none, at the model's price); it is billed
 * from the usage its answer reports, streamed or not (a streamed OpenAI chat is asked for its usage chunk), or, cut
 * midway, from the tokens streamed so far; a call refused or answered without usage gives its hold back before the
 * answer is sent. A GET or DELETE (a stored response, a file) is never billed.
 *
 * The path after the provider is relative to the provider's API version root: `/v1/passthrough/openai/embeddings`
 * goes to `<baseUrl>/embeddings` (`https://api.openai.com/v1/embeddings`), `/v1/passthrough/anthropic/messages/count_tokens`
 * to `<root>/v1/messages/count_tokens`.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { Transform, type Readable } from 'node:stream';
import httpProxy from '@fastify/http-proxy';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import type { Dispatcher } from 'undici';
import { AppError, type CallOptions, checkUrlShape, EgressError, egressDispatcher, egressPolicyFrom, errors, isAppError } from '@svc/kit';
import { modelCallInfo, promptTokenBound, domainMetrics } from '@svc/contracts';
import { resolvePrice, type ModelPrice } from '@svc/llm/pricing';
import type { GatewayDeps } from '../deps';
import { toAppError } from '../lib/app-error';
import { assertKeyTokens, takeKeySlot } from '../lib/key-usage';
import { sendOpenAiError } from '../lib/openai-error';
import { meteredStream, prepareBody, StreamMeter, usageOf, type Usage } from '../lib/passthrough-meter';
import { tenantStreams } from '../lib/sse';

export const PASSTHROUGH_PREFIX = '/v1/passthrough/:provider';

const DEFAULT_BASE: Record<string, string> = { openai: 'https://api.openai.com/v1', anthropic: 'https://api.anthropic.com' };
/** Request headers passed on to the provider: the request's description and the provider's own options, nothing else. */
const FORWARDED = ['content-type', 'accept', 'openai-beta', 'anthropic-version', 'anthropic-beta'];
/** Response headers never passed back: ours (request id, cookies) and hop or size headers the gateway sets itself. */
const DROPPED = ['set-cookie', 'x-request-id', 'request-id', 'content-length', 'transfer-encoding', 'connection', 'keep-alive'];
/** Names a request's cancel signal between `rewriteRequestHeaders` and the dispatcher, which removes it. */
const CANCEL_HEADER = 'x-svc-cancel-id';

interface Target {
  provider: 'openai' | 'anthropic';
  origin: string;
  /** The path of the API version root on the upstream (`/v1`). */
  basePath: string;
  apiKey: string;
  /** The body forwarded (the caller's, or with the output bound or the usage option put in). */
  body: unknown;
  call: CallOptions;
  /** Null for a request that is not a model call (GET, DELETE): nothing reserved, nothing billed. */
  meter: CallMeter | null;
  /** The id `rewriteRequestHeaders` names the request's cancel signal by (random: a caller may choose request ids). */
  cancelId: string;
}

interface CallMeter {
  /** The reservation's call id in billing (settled by RecordUsage, or released). */
  callId: string;
  /** The model the request named ('' when its body names none). */
  model: string;
  price: ModelPrice;
  /** The prompt's token bound: the input billed for a cut stream that reported none. */
  promptBound: number;
  endUser: string;
  startedAt: number;
  /** Set on a streamed answer: what it reported or streamed so far. */
  stream: StreamMeter | null;
  /** The pass-through asked for OpenAI's usage chunk, the caller did not: it is not shown. */
  hideUsageChunk: boolean;
  /** Frees the key's concurrency place (once). */
  releaseSlot: (() => Promise<void>) | null;
  settled: Promise<void> | null;
}

declare module 'fastify' {
  interface FastifyRequest {
    passthrough: Target | null;
  }
}

export interface PassthroughLimits {
  maxRequestBytes: number;
  maxResponseBytes: number;
  timeoutMs: number;
}

function findEgressError(err: unknown): EgressError | null {
  for (let e: unknown = err, depth = 0; e && depth < 6; e = (e as { cause?: unknown }).cause, depth++)
    if (e instanceof EgressError) return e;
  return null;
}

function notAllowed(e: EgressError): AppError {
  return errors.badRequest('base_url_not_allowed', `The provider base URL is not allowed: ${e.message}`);
}

export function passthroughRoutes(app: FastifyInstance, deps: GatewayDeps, limits: PassthroughLimits): void {
  const { identity, billing } = deps.clients;
  const policy = egressPolicyFrom(deps.config);
  // Every connection to a provider goes through the egress guard: the address checked is the address used.
  const dispatcher = egressDispatcher({ ...policy, connectTimeoutMs: 5000 });
  const upstream = cancellable(dispatcher);
  app.addHook('onClose', async () => dispatcher.destroy());

  const streams = tenantStreams(deps);
  const pricing = { creditsPerUsd: deps.config.creditsPerUsd, creditsPer1kTokens: deps.config.creditsPer1kTokens };

  /**
   * Closes the call in billing once: its usage when the provider reported some (or, streamed, sent some), else its
   * hold goes back; then its key place is freed. Awaited before an error answer, so `reserved` is back when it is read.
   */
  function settle(
    request: FastifyRequest,
    usage: Usage | null,
    outcome: { status: 'ok' | 'error' | 'cancelled'; servedModel?: string; errorCode?: string },
  ) {
    const m = request.passthrough?.meter;
    if (!m) return Promise.resolve();
    m.settled ??= (async () => {
      const t = request.passthrough!;
      try {
        if (usage)
          await billing.recordUsage(
            {
              callId: m.callId,
              provider: t.provider,
              model: m.model || outcome.servedModel || '',
              inputTokens: usage.inputTokens,
              outputTokens: usage.outputTokens,
              cachedInputTokens: usage.cachedInputTokens,
              source: 'passthrough',
              sourceId: request.id,
              price: m.price,
              call: modelCallInfo(
                {
                  origin: 'passthrough',
                  requestId: request.id,
                  endUser: m.endUser,
                  servedModel: outcome.servedModel || m.model,
                  userId: request.principal?.userId,
                },
                {
                  status: outcome.status,
                  errorCode: outcome.errorCode ?? '',
                  latencyMs: Date.now() - m.startedAt,
                  ttftMs: m.stream?.firstTokenAt ?? 0,
                },
              ),
            },
            t.call,
          );
        else await billing.release({ callId: m.callId }, t.call);
      } catch (err) {
        // The provider answered; billing's reservation expiry closes the hold if this did not reach it.
        request.log.error({ err, reqId: request.id }, 'could not record pass-through usage');
      } finally {
        await m.releaseSlot?.().catch(() => undefined);
      }
    })();
    return m.settled;
  }

  /** A streamed answer's close: billed from what it reported or streamed; `cut` when it did not end cleanly. */
  function settleStream(request: FastifyRequest, cut: boolean) {
    const m = request.passthrough?.meter;
    if (!m?.stream) return settle(request, null, { status: 'cancelled' });
    const usage = m.stream.usage(m.promptBound);
    return settle(request, usage, { status: cut ? 'cancelled' : 'ok', servedModel: m.stream.servedModel });
  }

  /** Resolves the tenant's provider, checks its address, and reserves the call; refusals are thrown as AppErrors. */
  async function prepare(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    const provider = (request.params as { provider: string }).provider;
    if (provider !== 'openai' && provider !== 'anthropic')
      throw new AppError('RESOURCE_NOT_FOUND', 'Pass-through serves the providers openai and anthropic', {
        resource: 'provider',
        id: provider.slice(0, 50),
      });
    const principal = request.principal!;
    const call: CallOptions = { token: principal.token, requestId: request.id, clientIp: request.ip };
    const metered = request.method === 'POST' || request.method === 'PUT' || request.method === 'PATCH';
    // The key's tokens per minute, as before any model call (its requests per minute were counted on the way in).
    if (metered) await assertKeyTokens(deps, principal, call, reply);
    const { settings: s } = await identity.resolveLlmSettings({}, call);
    const entry = s?.source === 'tenant' ? [s, ...s.fallbacks].find((e) => e.provider === provider) : undefined;
    if (!entry)
      throw errors.badRequest(
        'provider_not_configured',
        `This tenant has no ${provider} model in its LLM settings (PATCH /api/v1/tenant/settings/llm)`,
      );
    if (!entry.apiKey) throw errors.badRequest('provider_key_not_set', `The tenant's ${provider} settings have no API key`);
    const raw = (entry.baseUrl || DEFAULT_BASE[provider]).replace(/\/+$/, '');
    let base: URL;
    try {
      base = checkUrlShape(provider === 'anthropic' ? `${raw.replace(/\/v1$/, '')}/v1` : raw, policy);
    } catch (err) {
      if (err instanceof EgressError) throw notAllowed(err);
      throw err;
    }
    const target: Target = {
      provider,
      origin: base.origin,
      basePath: base.pathname.replace(/\/+$/, ''),
      apiKey: entry.apiKey,
      body: request.body,
      call,
      meter: null,
      cancelId: upstream.cancelOnClose(reply),
    };
    request.passthrough = target;
    if (!metered) {
      // A stored response read as a stream holds a socket like any other stream (it is not billed).
      if (request.method === 'GET' && /[?&]stream=true(&|$)/.test(request.url)) streams.holdFor(reply);
      return;
    }

    const path = `/${(request.params as { '*'?: string })['*'] ?? ''}`.split('?')[0];
    const body = prepareBody(provider, path, request.body, request.headers['content-type'], s!.maxTokens || deps.config.llmMaxTokens);
    target.body = body.body;
    // A place for the stream (the tenant's cap) and for the call (the key's concurrency), each taken where it is
    // checked; freed when the response closes and when the call is settled.
    if (body.stream) streams.holdFor(reply);
    const callId = `pt_${randomUUID().replaceAll('-', '')}`;
    const releaseSlot = await takeKeySlot(deps, principal, 'passthrough', callId, reply);
    const price = resolvePrice({ provider, upstreamModel: body.model, baseUrl: entry.baseUrl || undefined }, pricing);
    const promptBound = promptTokenBound(body.text, provider === 'openai' ? body.model : '');
    const meter: CallMeter = {
      callId,
      model: body.model,
      price,
      promptBound,
      endUser: body.endUser,
      startedAt: Date.now(),
      stream: null,
      hideUsageChunk: !body.clientWantsUsage,
      releaseSlot,
      settled: null,
    };
    // However the request ends (answered, refused, its client gone), its call is closed and its place freed.
    reply.raw.once('close', () => void (meter.stream ? settleStream(request, true) : settle(request, null, { status: 'cancelled' })));
    try {
      // Held before the request leaves, like every model call (CONTRACT.md 8): the prompt's token bound plus the
      // output bound it runs with, at the model's price.
      await billing.reserve(
        {
          callId,
          tokens: Math.max(1, promptBound + body.maxTokens),
          inputTokens: promptBound,
          outputTokens: body.maxTokens,
          price: { input: price.input, output: price.output, cachedInput: price.cachedInput, source: price.source },
          model: body.model,
          source: 'passthrough',
          sourceId: request.id,
          ttlMs: 0,
        },
        call,
      );
    } catch (err) {
      await releaseSlot?.();
      throw err;
    }
    target.meter = meter;
    // Its client left while the hold was being taken: nothing will be sent.
    if (reply.raw.closed) await settle(request, null, { status: 'cancelled' });
  }

  function rewriteRequestHeaders(request: FastifyRequest, headers: IncomingHttpHeaders): IncomingHttpHeaders {
    const t = request.passthrough!;
    const out: IncomingHttpHeaders = {
      host: headers.host,
      'accept-encoding': 'identity',
      'user-agent': 'svc-passthrough',
      [CANCEL_HEADER]: t.cancelId,
    };
    for (const name of FORWARDED) if (headers[name] !== undefined) out[name] = headers[name];
    if (headers['content-length'] !== undefined) out['content-length'] = headers['content-length'];
    // The tenant's stored key, in the provider's own header; the caller's Authorization is not among FORWARDED.
    if (t.provider === 'openai') out.authorization = `Bearer ${t.apiKey}`;
    else {
      out['x-api-key'] = t.apiKey;
      out['anthropic-version'] ??= '2023-06-01';
    }
    return out;
  }

  function rewriteHeaders(headers: IncomingHttpHeaders): IncomingHttpHeaders {
    const out: IncomingHttpHeaders = {};
    for (const [name, value] of Object.entries(headers)) if (!DROPPED.includes(name.toLowerCase())) out[name] = value;
    const upstreamId = headers['x-request-id'] ?? headers['request-id'];
    if (typeof upstreamId === 'string') out['x-upstream-request-id'] = upstreamId;
    return out;
  }

  function tooLarge(): AppError {
    return new AppError('SERVICE_UNAVAILABLE', `The provider's response is larger than ${limits.maxResponseBytes} bytes`, {
      reason: 'response_too_large',
      limit: limits.maxResponseBytes,
    });
  }

  /**
   * A JSON answer is read whole (capped) for its usage, then sent; an event stream passes through its meter; anything
   * else streams through, capped. A GET's or DELETE's answer is never billed, whatever usage it shows.
   */
  function onResponse(
    request: FastifyRequest,
    reply: FastifyReply,
    res: { statusCode: number; headers: IncomingHttpHeaders; stream: Readable },
  ) {
    const t = request.passthrough!;
    domainMetrics.passthroughRequests.inc({ provider: t.provider, status: String(res.statusCode) });
    const stream = res.stream;
    const type = String(res.headers['content-type'] ?? '');
    const failed = { status: 'error' as const, errorCode: `http_${res.statusCode}` };
    if (/json/i.test(type)) {
      const parts: Buffer[] = [];
      let size = 0;
      stream.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > limits.maxResponseBytes) {
          stream.destroy();
          void settle(request, null, failed).finally(() => !reply.sent && sendOpenAiError(request, reply, tooLarge()));
          return;
        }
        parts.push(chunk);
      });
      stream.on('error', () => {
        void settle(request, null, failed).finally(
          () =>
            !reply.sent &&
            sendOpenAiError(request, reply, errors.unavailable('The provider closed the connection before its answer ended')),
        );
      });
      stream.on('end', () => {
        if (reply.sent) return;
        const body = Buffer.concat(parts);
        let parsed: unknown = null;
        try {
          parsed = JSON.parse(body.toString('utf8'));
        } catch {
          parsed = null;
        }
        const usage = res.statusCode < 400 ? usageOf(parsed) : null;
        const model = typeof (parsed as { model?: unknown })?.model === 'string' ? (parsed as { model: string }).model.slice(0, 200) : '';
        const outcome = res.statusCode < 400 ? { status: 'ok' as const, servedModel: model } : failed;
        void settle(request, usage, outcome).finally(() => reply.send(body));
      });
      return;
    }
    const m = t.meter;
    if (m && /^text\/event-stream/i.test(type) && res.statusCode < 400) {
      m.stream = new StreamMeter(!!m.hideUsageChunk);
      const metered = meteredStream(m.stream, limits.maxResponseBytes, tooLarge);
      let ended = false;
      stream.on('end', () => (ended = true));
      metered.on('end', () => void settleStream(request, !ended));
      // Its client gone, the provider's stream is closed too: the generation stops, what came is billed.
      metered.on('close', () => !ended && stream.destroy());
      stream.on('error', (err) => metered.destroy(err));
      reply.send(stream.pipe(metered));
      return;
    }
    let size = 0;
    const capped = new Transform({
      transform(chunk: Buffer, _enc, done) {
        size += chunk.length;
        if (size > limits.maxResponseBytes) return done(tooLarge());
        done(null, chunk);
      },
    });
    capped.on('close', () => void settle(request, null, res.statusCode < 400 ? { status: 'ok' } : failed));
    stream.on('error', (err) => capped.destroy(err));
    reply.send(stream.pipe(capped));
  }

  async function onError(reply: FastifyReply, { error }: { error: unknown }) {
    const request = reply.request;
    domainMetrics.passthroughRequests.inc({ provider: request.passthrough?.provider ?? 'unknown', status: '0' });
    // A request cancelled because its caller left is no failure: nobody is there to answer.
    if (reply.raw.closed && !reply.sent) return settle(request, null, { status: 'cancelled' });
    const egress = findEgressError(error);
    const status = (error as { statusCode?: number }).statusCode;
    const appError = egress
      ? notAllowed(egress)
      : status === 504
        ? new AppError('GATEWAY_TIMEOUT', 'The provider did not answer in time', { reason: 'provider_timeout' })
        : errors.unavailable('The provider could not be reached');
    if (!egress) request.log.warn({ err: error, reqId: request.id }, 'pass-through request failed');
    // The hold goes back before the refusal is answered (the caller may read `reserved` at once).
    await settle(request, null, { status: 'error', errorCode: appError.code.toLowerCase() });
    if (!reply.sent) sendOpenAiError(request, reply, appError);
  }

  app.register(
    async (scope) => {
      scope.decorateRequest('passthrough', null);
      // Under /v1 errors are OpenAI's shape, the authentication hook's refusals (401, 403, 429) included.
      scope.setErrorHandler(async (err, request, reply) => {
        // A refusal after the reservation (a path the proxy cannot build) gives the hold back before it is answered.
        await settle(request, null, { status: 'error', errorCode: 'refused' });
        sendOpenAiError(request, reply, isAppError(err) ? err : toAppError(err as never, limits.maxRequestBytes));
      });
      // Bodies are forwarded as they came, whatever their type, up to the pass-through's own limit.
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: limits.maxRequestBytes }, (_req, body, done) => done(null, body));
      await scope.register(httpProxy, {
        upstream: '',
        proxyPayloads: false,
        httpMethods: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'],
        config: { access: 'llm:passthrough', rateLimited: true, modelCall: true },
        undici: upstream as never,
        disableRequestLogging: true,
        preHandler: async (request: FastifyRequest, reply: FastifyReply) => prepare(request, reply),
        replyOptions: {
          getUpstream: (request: FastifyRequest) => request.passthrough!.origin,
          rewriteRequestHeaders: (request: FastifyRequest, headers: IncomingHttpHeaders) => rewriteRequestHeaders(request, headers),
          rewriteHeaders: (headers: IncomingHttpHeaders) => rewriteHeaders(headers),
          onResponse: onResponse as never,
          onError: onError as never,
          timeout: limits.timeoutMs,
        },
        handler: (request: FastifyRequest, reply: FastifyReply, dest: string, options: Record<string, unknown>) => {
          const t = request.passthrough!;
          const body = t.body;
          const withBody =
            Buffer.isBuffer(body) && body.length > 0
              ? { body, contentType: request.headers['content-type'] ?? 'application/octet-stream' }
              : request.method === 'GET' || request.method === 'DELETE'
                ? {}
                : { body: null };
          return reply.from(`${t.basePath}${dest}`, { ...options, ...withBody });
        },
      } as never);
    },
    { prefix: PASSTHROUGH_PREFIX },
  );
}

/**
 * The proxy's dispatcher, each request given its cancel signal: @fastify/reply-from passes undici none, so a caller
 * who left before the provider's headers kept the provider's request (and the gateway's close) waiting until
 * PASSTHROUGH_TIMEOUT_MS. The signal travels by an id in a header the dispatcher reads and removes.
 */
function cancellable(dispatcher: Dispatcher) {
  const signals = new Map<string, AbortSignal>();
  return {
    /** A new id whose signal aborts when the caller's connection closes, before the answer or during it. */
    cancelOnClose(reply: FastifyReply): string {
      const id = randomUUID();
      const controller = new AbortController();
      signals.set(id, controller.signal);
      reply.raw.once('close', () => {
        signals.delete(id);
        controller.abort();
      });
      return id;
    },
    request(options: Dispatcher.RequestOptions, callback: (err: Error | null, data: Dispatcher.ResponseData) => void) {
      const headers = { ...(options.headers as Record<string, string>) };
      const signal = signals.get(headers[CANCEL_HEADER]);
      delete headers[CANCEL_HEADER];
      return dispatcher.request({ ...options, headers, signal }, callback);
    },
  };
}
