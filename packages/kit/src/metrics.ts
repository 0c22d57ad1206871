import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import client from 'prom-client';

/**
 * The process's Prometheus metrics (prom-client). Counters cost nothing while idle; the default process metrics
 * (CPU, memory, event-loop delay) start only when something serves them, so an unscraped process keeps no timer.
 */
export const registry = new client.Registry();

const SECONDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

export const metrics = {
  httpRequests: new client.Counter({
    name: 'http_requests_total',
    help: 'HTTP requests answered by the gateway, by route template and status',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  }),
  httpDuration: new client.Histogram({
    name: 'http_request_duration_seconds',
    help: 'Time from request to answer at the gateway',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: SECONDS,
    registers: [registry],
  }),
  passthroughRequests: new client.Counter({
    name: 'llm_passthrough_requests_total',
    help: 'Requests forwarded to a tenant provider by /v1/passthrough, by provider and upstream status (0: not answered)',
    labelNames: ['provider', 'status'] as const,
    registers: [registry],
  }),
  rateLimited: new client.Counter({
    name: 'rate_limit_rejections_total',
    help: 'Requests refused with 429, by reason',
    labelNames: ['reason'] as const,
    registers: [registry],
  }),
  grpcHandled: new client.Counter({
    name: 'grpc_server_handled_total',
    help: 'gRPC calls completed by this process, by method and status code',
    labelNames: ['method', 'code'] as const,
    registers: [registry],
  }),
  grpcDuration: new client.Histogram({
    name: 'grpc_server_handling_seconds',
    help: 'Time a gRPC call took in this process (unary; streams until their last message)',
    labelNames: ['method'] as const,
    buckets: SECONDS,
    registers: [registry],
  }),
  readCache: new client.Counter({
    name: 'gateway_read_cache_total',
    help: "Reads the gateway's caches saw, by cache (tenants, projects) and outcome (hit; miss: loaded from the service; bypass: the feed is not being read)",
    labelNames: ['cache', 'outcome'] as const,
    registers: [registry],
  }),
  outboxPublished: new client.Counter({
    name: 'outbox_events_published_total',
    help: 'Domain events the outbox relay handed to the bus',
    registers: [registry],
  }),
  outboxLag: new client.Gauge({
    name: 'outbox_lag_seconds',
    help: 'Age of the oldest event in the last batch the relay published (0 when idle)',
    registers: [registry],
  }),
  busHandled: new client.Counter({
    name: 'bus_messages_handled_total',
    help: 'Bus messages given to a handler, by topic, consumer group and outcome (ok; retry: a dependency was unavailable, retried without limit; poison: the message is bad, retried up to BUS_MAX_ATTEMPTS; dead_letter)',
    labelNames: ['topic', 'group', 'outcome'] as const,
    registers: [registry],
  }),
  busLag: new client.Gauge({
    name: 'bus_consumer_lag_seconds',
    help: "Age of the last message a consumer group's handler got in this process, by topic and group (publish time to handling)",
    labelNames: ['topic', 'group'] as const,
    registers: [registry],
  }),
  busStalled: new client.Gauge({
    name: 'bus_consumer_stalled',
    help: 'Partitions of a consumer group in this process whose handler is retrying a message on an unavailable dependency (the messages behind it wait), by topic and group',
    labelNames: ['topic', 'group'] as const,
    registers: [registry],
  }),
  deliveries: new client.Counter({
    name: 'webhook_delivery_attempts_total',
    help: 'Webhook delivery attempts, by outcome (delivered, retry, failed)',
    labelNames: ['outcome'] as const,
    registers: [registry],
  }),
  runs: new client.Counter({
    name: 'agent_runs_finished_total',
    help: 'Agent runs that reached a final status',
    labelNames: ['status'] as const,
    registers: [registry],
  }),
  reservations: new client.Histogram({
    name: 'credit_reservation_seconds',
    help: 'Time a model call waited for its credit reservation in billing before it was accepted or refused (what a reservation adds to accepting a chat message or an agent step), by outcome',
    labelNames: ['outcome'] as const,
    // Fine below 10 ms: the reservation sits on the request path of every model call.
    buckets: [0.00025, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.01, 0.025, 0.1, 1],
    registers: [registry],
  }),
  replies: new client.Counter({
    name: 'chat_replies_finished_total',
    help: 'Chat replies that reached a final status',
    labelNames: ['status'] as const,
    registers: [registry],
  }),
  llmTokens: new client.Counter({
    name: 'llm_tokens_total',
    help: 'Tokens of model calls, by caller (chat, agents) and direction (input, output)',
    labelNames: ['source', 'direction'] as const,
    registers: [registry],
  }),
};

let defaultsStarted = false;

/** The text exposition of every metric of this process; starts the process metrics on first use. */
export async function metricsText(): Promise<{ contentType: string; body: string }> {
  if (!defaultsStarted) {
    defaultsStarted = true;
    client.collectDefaultMetrics({ register: registry, eventLoopMonitoringPrecision: 20 });
  }
  return { contentType: registry.contentType, body: await registry.metrics() };
}

/** A listener for Prometheus on its own port (METRICS_PORT): `GET /metrics`, nothing else. */
export async function serveMetrics(port: number, host: string): Promise<{ server: Server; port: number }> {
  const server = createServer((req, res) => {
    if (req.method !== 'GET' || (req.url ?? '').split('?')[0] !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    metricsText().then(
      ({ contentType, body }) => res.writeHead(200, { 'content-type': contentType }).end(body),
      () => res.writeHead(500, { 'content-type': 'text/plain' }).end('metrics failed\n'),
    );
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(port, host, () => resolve()));
  return { server, port: (server.address() as AddressInfo).port };
}
