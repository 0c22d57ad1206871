/**
 * Model calls as the OpenTelemetry GenAI semantic conventions describe them: a CLIENT span `chat {model}` (or
 * `embeddings {model}`) with the gen_ai.* attributes, and the two client metrics, gen_ai.client.token.usage and
 * gen_ai.client.operation.duration, as the Prometheus histograms svc_gen_ai_client_token_usage and
 * svc_gen_ai_client_operation_duration_seconds (labels: the attributes, dots as underscores). Every provider
 * createProvider makes is wrapped, so each attempt of a fallback chain is one span.
 */
import { SpanKind, SpanStatusCode, trace, type Span } from '@opentelemetry/api';
import { domainMetrics } from '@svc/contracts/metrics';
import { genAiSpanAttributes, type GenAiCall } from '@svc/kit/telemetry-attributes';
import {
  isLlmError,
  type LlmEmbedRequest,
  type LlmEvent,
  type LlmProvider,
  type LlmProviderKind,
  type LlmRequest,
  type LlmSettings,
  type LlmStreamOptions,
} from './types';

const tracer = trace.getTracer('@svc/llm');

/**
 * gen_ai.provider.name: the conventions' well-known values where one fits; `openai_compatible` (our own value) for
 * any server that speaks OpenAI's protocol, which may be any vendor.
 */
export const GEN_AI_PROVIDER: Record<LlmProviderKind, string> = {
  openai: 'openai',
  'azure-openai': 'azure.ai.openai',
  anthropic: 'anthropic',
  gemini: 'gcp.gemini',
  bedrock: 'aws.bedrock',
  'openai-compatible': 'openai_compatible',
};

/** One call being measured: its span, its start, and what is known of it so far. */
class ModelCall {
  private readonly span: Span;
  private readonly started = performance.now();

  constructor(private readonly call: GenAiCall) {
    this.span = tracer.startSpan(`${call.operation} ${call.requestModel ?? ''}`.trim(), {
      kind: SpanKind.CLIENT,
      attributes: genAiSpanAttributes(call),
    });
  }

  tokens(inputTokens: number, outputTokens: number | undefined, responseModel?: string): void {
    this.call.inputTokens = inputTokens;
    this.call.outputTokens = outputTokens;
    if (responseModel) this.call.responseModel = responseModel;
  }

  end(err?: unknown): void {
    const c = this.call;
    // A provider that did not name the model that answered (Bedrock's Converse never does): the one asked for.
    c.responseModel ??= c.requestModel;
    this.span.setAttributes(genAiSpanAttributes(c));
    const errorType = err === undefined ? '' : isLlmError(err) ? err.kind : 'error';
    if (errorType) {
      this.span.setAttribute('error.type', errorType);
      this.span.setStatus({ code: SpanStatusCode.ERROR, message: errorType });
    }
    this.span.end();
    const labels = {
      gen_ai_operation_name: c.operation,
      gen_ai_provider_name: c.provider,
      gen_ai_request_model: c.requestModel ?? '',
      gen_ai_response_model: c.responseModel ?? '',
    };
    domainMetrics.genAiDuration.observe({ ...labels, error_type: errorType }, (performance.now() - this.started) / 1000);
    if (c.inputTokens !== undefined) domainMetrics.genAiTokenUsage.observe({ ...labels, gen_ai_token_type: 'input' }, c.inputTokens);
    if (c.outputTokens !== undefined) domainMetrics.genAiTokenUsage.observe({ ...labels, gen_ai_token_type: 'output' }, c.outputTokens);
  }
}

/** `provider` measured: each stream and embedding call is a span and a sample of the GenAI metrics. */
export function instrumented(provider: LlmProvider, settings: LlmSettings): LlmProvider {
  const name = GEN_AI_PROVIDER[settings.provider] ?? settings.provider;
  const start = (operation: string, model: string | undefined) =>
    new ModelCall({ operation, provider: name, requestModel: model || settings.model || undefined });

  async function* stream(request: LlmRequest, options?: LlmStreamOptions): AsyncGenerator<LlmEvent> {
    const call = start('chat', request.model);
    let failure: unknown;
    try {
      for await (const event of provider.stream(request, options)) {
        if (event.type === 'usage') call.tokens(event.inputTokens, event.outputTokens, event.model);
        yield event;
      }
    } catch (err) {
      failure = err;
      throw err;
    } finally {
      // Also when the consumer stopped early (break): the call ended there.
      call.end(failure);
    }
  }

  const measured: LlmProvider = { stream };
  const embed = provider.embed?.bind(provider);
  if (embed)
    measured.embed = async (request: LlmEmbedRequest, options?: LlmStreamOptions) => {
      const call = start('embeddings', request.model);
      try {
        const result = await embed(request, options);
        call.tokens(result.inputTokens, undefined);
        call.end();
        return result;
      } catch (err) {
        call.end(err);
        throw err;
      }
    };
  return measured;
}
