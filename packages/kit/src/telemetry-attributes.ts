/**
 * Attributes for spans: on the HTTP request's own span (what a support engineer searches by), and the names the
 * OpenTelemetry GenAI semantic conventions give a model call. No-ops cost next to nothing when tracing is off.
 */
import { context, createContextKey, type Attributes, type Span } from '@opentelemetry/api';

/**
 * The SERVER span of the HTTP request being handled (the http instrumentation's, kept in the context for its
 * route): hooks run inside framework spans, so `trace.getActiveSpan()` would be one of those. Undefined untraced.
 */
export function requestSpan(): Span | undefined {
  return (context.active().getValue(RPC_METADATA_KEY) as { span?: Span } | undefined)?.span;
}

/**
 * @opentelemetry/core's key of that metadata (its `getRPCMetadata` reads it): a context key is `Symbol.for` its
 * description, so the API alone reads it, and core (~30 ms of a process's start) is not loaded for it. The unit test
 * sets it with core's `setRPCMetadata`.
 */
const RPC_METADATA_KEY = createContextKey('OpenTelemetry SDK Context Key RPC_METADATA');

/** Who and which request, on the request's span: ids only, never a credential. */
export interface RequestIdentity {
  requestId: string;
  tenantId?: string;
  apiKeyId?: string;
}

/** Attribute names of RequestIdentity (searchable in any trace backend). */
export const REQUEST_ATTRIBUTES = { requestId: 'svc.request.id', tenantId: 'svc.tenant.id', apiKeyId: 'svc.api_key.id' } as const;

/** Sets the request id, tenant and API key on the current HTTP request's span, when there is one. */
export function tagRequestSpan(identity: RequestIdentity): void {
  const span = requestSpan();
  if (!span) return;
  span.setAttribute(REQUEST_ATTRIBUTES.requestId, identity.requestId);
  if (identity.tenantId) span.setAttribute(REQUEST_ATTRIBUTES.tenantId, identity.tenantId);
  if (identity.apiKeyId) span.setAttribute(REQUEST_ATTRIBUTES.apiKeyId, identity.apiKeyId);
}

/** A model call as the GenAI conventions describe it. */
export interface GenAiCall {
  /** `chat`, `text_completion`, `embeddings`, `generate_content`, ... (gen_ai.operation.name). */
  operation: string;
  /** `openai`, `anthropic`, `gcp.gemini`, `aws.bedrock`, ... (gen_ai.provider.name). */
  provider: string;
  requestModel?: string;
  /** The model that answered, as the provider named it. */
  responseModel?: string;
  inputTokens?: number;
  outputTokens?: number;
}

/**
 * The `gen_ai.*` attributes of a model-call span (OpenTelemetry GenAI semantic conventions), omitting what is unknown.
 * Name the span `${operation} ${requestModel}` (the conventions' span name).
 */
export function genAiSpanAttributes(call: GenAiCall): Attributes {
  const out: Attributes = { 'gen_ai.operation.name': call.operation, 'gen_ai.provider.name': call.provider };
  if (call.requestModel) out['gen_ai.request.model'] = call.requestModel;
  if (call.responseModel) out['gen_ai.response.model'] = call.responseModel;
  if (call.inputTokens !== undefined) out['gen_ai.usage.input_tokens'] = call.inputTokens;
  if (call.outputTokens !== undefined) out['gen_ai.usage.output_tokens'] = call.outputTokens;
  return out;
}
