import { context, trace } from '@opentelemetry/api';
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks';
import { RPCType, setRPCMetadata } from '@opentelemetry/core';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { genAiSpanAttributes, tagRequestSpan } from './telemetry-attributes';

it('names a model call with the OpenTelemetry GenAI attributes, leaving out what is unknown', () => {
  expect(
    genAiSpanAttributes({
      operation: 'chat',
      provider: 'openai',
      requestModel: 'gpt-4o',
      responseModel: 'gpt-4o-2024-08-06',
      inputTokens: 12,
      outputTokens: 0,
    }),
  ).toEqual({
    'gen_ai.operation.name': 'chat',
    'gen_ai.provider.name': 'openai',
    'gen_ai.request.model': 'gpt-4o',
    'gen_ai.response.model': 'gpt-4o-2024-08-06',
    'gen_ai.usage.input_tokens': 12,
    'gen_ai.usage.output_tokens': 0,
  });
  expect(genAiSpanAttributes({ operation: 'embeddings', provider: 'gcp.gemini' })).toEqual({
    'gen_ai.operation.name': 'embeddings',
    'gen_ai.provider.name': 'gcp.gemini',
  });
});

describe('tagRequestSpan', () => {
  const exporter = new InMemorySpanExporter();
  const tracer = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] }).getTracer('test');
  const manager = new AsyncLocalStorageContextManager().enable();
  beforeAll(() => context.setGlobalContextManager(manager));
  afterAll(() => context.disable());

  it("tags the HTTP request's own span, not the framework span active inside it", () => {
    const request = tracer.startSpan('GET');
    // As the http instrumentation does: the request span is kept in the context's RPC metadata.
    const ctx = setRPCMetadata(trace.setSpan(context.active(), request), { type: RPCType.HTTP, span: request });
    context.with(ctx, () => {
      const hook = tracer.startSpan('onRequest hook');
      context.with(trace.setSpan(context.active(), hook), () =>
        tagRequestSpan({ requestId: 'req-1', tenantId: 'ten_1', apiKeyId: 'key_1' }),
      );
      hook.end();
    });
    request.end();
    const spans = Object.fromEntries(exporter.getFinishedSpans().map((s) => [s.name, s.attributes]));
    expect(spans.GET).toEqual({ 'svc.request.id': 'req-1', 'svc.tenant.id': 'ten_1', 'svc.api_key.id': 'key_1' });
    expect(spans['onRequest hook']).toEqual({});
  });
});
