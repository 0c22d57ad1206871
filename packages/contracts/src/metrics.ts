import client from 'prom-client';
import { registry } from '@svc/kit/metrics';

/** Buckets the OpenTelemetry GenAI conventions advise for gen_ai.client.token.usage ({token}): powers of 4. */
const TOKEN_BUCKETS = [1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864];
/** ...and for gen_ai.client.operation.duration (seconds), 10 ms doubling up to ~82 s. */
const GEN_AI_SECONDS = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92];
/** The attributes of the GenAI conventions as Prometheus labels (dots become underscores, as the OTel exporter does). */
const GEN_AI_LABELS = ['gen_ai_operation_name', 'gen_ai_provider_name', 'gen_ai_request_model', 'gen_ai_response_model'] as const;

/**
 * The domain's Prometheus metrics (model calls, credit reservations, agent runs, chat replies, webhook deliveries),
 * in kit's one registry beside the infrastructure's (`metrics` of @svc/kit): every process serves them all.
 */
export const domainMetrics = {
  passthroughRequests: new client.Counter({
    name: 'svc_llm_passthrough_requests_total',
    help: 'Requests forwarded to a tenant provider by /v1/passthrough, by provider and upstream status (0: not answered)',
    labelNames: ['provider', 'status'] as const,
    registers: [registry],
  }),
  deliveries: new client.Counter({
    name: 'svc_webhook_delivery_attempts_total',
    help: 'Webhook delivery attempts, by outcome (delivered, retry, failed)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  }),
  runs: new client.Counter({
    name: 'svc_agent_runs_finished_total',
    help: 'Agent runs that reached a final status',
    labelNames: ['status'] as const,
    registers: [registry],
  }),
  reservations: new client.Histogram({
    name: 'svc_credit_reservation_seconds',
    help: 'Time a model call waited for its credit reservation in billing before it was accepted or refused (what a reservation adds to accepting a chat message or an agent step), by outcome',
    labelNames: ['outcome'] as const,
    // Fine below 10 ms: the reservation sits on the request path of every model call.
    buckets: [0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.01, 0.025, 0.1, 1],
    registers: [registry],
  }),
  replies: new client.Counter({
    name: 'svc_chat_replies_finished_total',
    help: 'Chat replies that reached a final status',
    labelNames: ['status'] as const,
    registers: [registry],
  }),
  llmTokens: new client.Counter({
    name: 'svc_llm_tokens_total',
    help: 'Tokens of model calls, by caller (chat, agents) and direction (input, output)',
    labelNames: ['source', 'direction'] as const,
    registers: [registry],
  }),
  genAiTokenUsage: new client.Histogram({
    name: 'svc_gen_ai_client_token_usage',
    help: 'Tokens of each model call, by gen_ai_token_type (input, output): gen_ai.client.token.usage of the OpenTelemetry GenAI conventions',
    labelNames: [...GEN_AI_LABELS, 'gen_ai_token_type'] as const,
    buckets: TOKEN_BUCKETS,
    registers: [registry],
  }),
  genAiDuration: new client.Histogram({
    name: 'svc_gen_ai_client_operation_duration_seconds',
    help: 'Time of each model call, from the request to its last event, by outcome (error_type empty when it succeeded): gen_ai.client.operation.duration of the OpenTelemetry GenAI conventions',
    labelNames: [...GEN_AI_LABELS, 'error_type'] as const,
    buckets: GEN_AI_SECONDS,
    registers: [registry],
  }),
  breakerOpened: new client.Counter({
    name: 'svc_llm_breaker_opened_total',
    help: "Times a model deployment's circuit breaker opened in this process (its calls skipped for the cooldown), by provider",
    labelNames: ['provider'] as const,
    registers: [registry],
  }),
  reservationsExpired: new client.Counter({
    name: 'svc_credit_reservations_expired_total',
    help: 'Credit reservations the sweeper expired because no settle or release came within their TTL (a caller died mid-call)',
    registers: [registry],
  }),
  webhookDue: new client.Gauge({
    name: 'svc_webhook_deliveries_due',
    help: "Webhook deliveries due now and not yet claimed, as this replica's last queue scan saw them (the backlog)",
    registers: [registry],
  }),
};
