/**
 * `/v1/passthrough/:provider/*` (CONTRACT.md 9): the provider endpoints the platform does not model (embeddings,
 * moderations, audio, images) forwarded with @fastify/http-proxy to the tenant's own configured provider, with the
 * tenant's stored key put in and the caller's credential never passed on. API keys only, scope `llm:passthrough`;
 * the egress guard applies when the connection opens; request and response sizes are capped; a response that
 * reports usage is billed to the tenant and the key (a reservation holds the call's cost first, as every model call
 * does), and every request counts against the key's rate limits.
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
import {
  AppError,
  type CallOptions,
  checkUrlShape,
  EgressError,
  egressDispatcher,
  egressPolicyFrom,
  errors,
  isAppError,
  metrics,
} from '@svc/kit';
import { reservationTokens } from '@svc/contracts';
import type { GatewayDeps } from '../deps';
import { toAppError } from '../lib/app-error';
import { assertKeyTokens } from '../lib/key-usage';
import { sendOpenAiError } from '../lib/openai-error';

export const PASSTHROUGH_PREFIX = '/v1/passthrough/:provider';

const DEFAULT_BASE: Record<string, string> = { openai: 'https://api.openai.com/v1', anthropic: 'https://api.anthropic.com' };
/** Request headers passed on to the provider: the request's description and the provider's own options, nothing else. */
const FORWARDED = ['content-type', 'accept', 'openai-beta', 'anthropic-version', 'anthropic-beta'];
/** Response headers never passed back: ours (request id, cookies) and hop or size headers the gateway sets itself. */
const DROPPED = ['set-cookie', 'x-request-id', 'request-id', 'content-length', 'transfer-encoding', 'connection', 'keep-alive'];

interface Target {
  provider: 'openai' | 'anthropic';
  origin: string;
  /** The path of the API version root on the upstream (`/v1`). */
  basePath: string;
  apiKey: string;
  /** The reservation's call id in billing (settled by RecordUsage, or released). */
  callId: string;
  call: CallOptions;
  /** The model the request named, when its body is JSON with a model (usage is billed under it if the response names none). */
  model: string;
  settled: boolean;
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

function sizeOf(body: unknown): number {
  return Buffer.isBuffer(body) ? body.length : 0;
}

/** The JSON body's fields that bound a call's cost, when it is JSON: its model and output token limit. */
function describeBody(body: unknown, contentType: string | undefined): { model: string; maxTokens: number } {
  if (!Buffer.isBuffer(body) || !/json/i.test(contentType ?? '') || body.length === 0) return { model: '', maxTokens: 0 };
  try {
    const parsed = JSON.parse(body.toString('utf8')) as Record<string, unknown>;
    const limit = [parsed.max_tokens, parsed.max_completion_tokens, parsed.max_output_tokens].find((v) => typeof v === 'number');
    return {
      model: typeof parsed.model === 'string' ? parsed.model.slice(0, 200) : '',
      maxTokens: typeof limit === 'number' && Number.isFinite(limit) ? Math.max(0, Math.min(200_000, Math.floor(limit))) : 0,
    };
  } catch {
    return { model: '', maxTokens: 0 };
  }
}

/** Usage in the shapes OpenAI (`prompt_tokens`/`completion_tokens`, `input_tokens`/`output_tokens`) and Anthropic use. */
export function usageOf(body: unknown): { inputTokens: number; outputTokens: number } | null {
  const u = (body as { usage?: Record<string, unknown> } | null)?.usage;
  if (!u || typeof u !== 'object') return null;
  const num = (...values: unknown[]) => {
    const v = values.find((x) => typeof x === 'number' && Number.isFinite(x) && x >= 0);
    return typeof v === 'number' ? Math.floor(v) : 0;
  };
  const inputTokens = num(u.prompt_tokens, u.input_tokens);
  const total = num(u.total_tokens);
  const outputTokens = num(u.completion_tokens, u.output_tokens) || Math.max(0, total - inputTokens);
  return inputTokens + outputTokens > 0 ? { inputTokens, outputTokens } : null;
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

  /** Closes the call in billing once: its usage when the provider reported some, else its reservation goes back. */
  async function settle(request: FastifyRequest, usage: { inputTokens: number; outputTokens: number } | null, model: string) {
    const t = request.passthrough;
    if (!t || t.settled) return;
    t.settled = true;
    try {
      if (usage)
        await billing.recordUsage(
          { callId: t.callId, provider: t.provider, model: model || t.model, ...usage, source: 'passthrough', sourceId: request.id },
          t.call,
        );
      else await billing.release({ callId: t.callId }, t.call);
    } catch (err) {
      // The provider answered; billing's reservation expiry closes the hold if this did not reach it.
      request.log.error({ err, reqId: request.id }, 'could not record pass-through usage');
    }
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
    // The key's tokens per minute, as before any model call (its requests per minute were counted on the way in).
    await assertKeyTokens(deps, principal, call, reply);
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
    const { model, maxTokens } = describeBody(request.body, request.headers['content-type']);
    const callId = `pt_${randomUUID().replaceAll('-', '')}`;
    // Held before the request leaves, like every model call (CONTRACT.md 8): the body at 4 characters a token plus
    // the output bound it asks for.
    await billing.reserve(
      {
        callId,
        tokens: Math.max(1, reservationTokens(sizeOf(request.body), maxTokens)),
        source: 'passthrough',
        sourceId: request.id,
        ttlMs: 0,
      },
      call,
    );
    request.passthrough = {
      provider,
      origin: base.origin,
      basePath: base.pathname.replace(/\/+$/, ''),
      apiKey: entry.apiKey,
      callId,
      call,
      model,
      settled: false,
    };
  }

  function rewriteRequestHeaders(request: FastifyRequest, headers: IncomingHttpHeaders): IncomingHttpHeaders {
    const t = request.passthrough!;
    const out: IncomingHttpHeaders = { host: headers.host, 'accept-encoding': 'identity', 'user-agent': 'svc-passthrough' };
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

  /** A JSON answer is read whole (capped) for its usage, then sent; anything else streams through, capped. */
  function onResponse(
    request: FastifyRequest,
    reply: FastifyReply,
    res: { statusCode: number; headers: IncomingHttpHeaders; stream: Readable },
  ) {
    const t = request.passthrough!;
    metrics.passthroughRequests.inc({ provider: t.provider, status: String(res.statusCode) });
    const stream = res.stream;
    if (/json/i.test(String(res.headers['content-type'] ?? ''))) {
      const parts: Buffer[] = [];
      let size = 0;
      stream.on('data', (chunk: Buffer) => {
        size += chunk.length;
        if (size > limits.maxResponseBytes) {
          stream.destroy();
          void settle(request, null, '');
          if (!reply.sent) sendOpenAiError(request, reply, tooLarge());
          return;
        }
        parts.push(chunk);
      });
      stream.on('error', () => {
        void settle(request, null, '');
        if (!reply.sent) sendOpenAiError(request, reply, errors.unavailable('The provider closed the connection before its answer ended'));
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
        void settle(request, usage, model).finally(() => reply.send(body));
      });
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
    const finished = () => void settle(request, null, '');
    capped.on('close', finished);
    stream.on('error', (err) => capped.destroy(err));
    reply.send(stream.pipe(capped));
  }

  function onError(reply: FastifyReply, { error }: { error: unknown }) {
    const request = reply.request;
    void settle(request, null, '');
    const egress = findEgressError(error);
    const status = (error as { statusCode?: number }).statusCode;
    metrics.passthroughRequests.inc({ provider: request.passthrough?.provider ?? 'unknown', status: '0' });
    const appError = egress
      ? notAllowed(egress)
      : status === 504
        ? new AppError('GATEWAY_TIMEOUT', 'The provider did not answer in time', { reason: 'provider_timeout' })
        : errors.unavailable('The provider could not be reached');
    if (!egress) request.log.warn({ err: error, reqId: request.id }, 'pass-through request failed');
    sendOpenAiError(request, reply, appError);
  }

  app.register(
    async (scope) => {
      scope.decorateRequest('passthrough', null);
      // Under /v1 errors are OpenAI's shape, the authentication hook's refusals (401, 403, 429) included.
      scope.setErrorHandler((err, request, reply) =>
        sendOpenAiError(request, reply, isAppError(err) ? err : toAppError(err as never, limits.maxRequestBytes)),
      );
      // Bodies are forwarded as they came, whatever their type, up to the pass-through's own limit.
      scope.removeAllContentTypeParsers();
      scope.addContentTypeParser('*', { parseAs: 'buffer', bodyLimit: limits.maxRequestBytes }, (_req, body, done) => done(null, body));
      await scope.register(httpProxy, {
        upstream: '',
        proxyPayloads: false,
        httpMethods: ['GET', 'POST', 'PUT', 'PATCH', 'DELETE'],
        config: { access: 'llm:passthrough', rateLimited: true },
        undici: dispatcher as never,
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
          const body = request.body;
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
