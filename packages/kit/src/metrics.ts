import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import client from 'prom-client';

/**
 * Every metric this project exports is named `svc_...` (the default process metrics too), so one job's series never
 * collide with another's in a shared Prometheus; deploy/monitoring's rules and dashboard name them (docs/runbooks/monitoring.md).
 */
export const METRIC_PREFIX = 'svc_';

/**
 * The process's Prometheus metrics (prom-client), the one metric system of the project (the OpenTelemetry SDK exports
 * traces and logs only). Counters cost nothing while idle; the default process metrics
 * (CPU, memory, event-loop delay) start only when something serves them, so an unscraped process keeps no timer.
 */
export const registry = new client.Registry();

const SECONDS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

/** The infrastructure's metrics: HTTP, gRPC, outbox, bus, health, the gateway's caches and rate limit. The domain's
 * (model calls, credits, runs, replies, webhooks) are @svc/contracts' `domainMetrics`, in this same registry. */
export const metrics = {
  httpRequests: new client.Counter({
    name: 'svc_http_requests_total',
    help: 'HTTP requests answered by the gateway, by route template and status',
    labelNames: ['method', 'route', 'status'] as const,
    registers: [registry],
  }),
  httpDuration: new client.Histogram({
    name: 'svc_http_request_duration_seconds',
    help: 'Time from request to answer at the gateway',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: SECONDS,
    registers: [registry],
  }),
  rateLimited: new client.Counter({
    name: 'svc_rate_limit_rejections_total',
    help: 'Requests refused with 429, by reason',
    labelNames: ['reason'] as const,
    registers: [registry],
  }),
  grpcHandled: new client.Counter({
    name: 'svc_grpc_server_handled_total',
    help: 'gRPC calls completed by this process, by method and status code',
    labelNames: ['method', 'code'] as const,
    registers: [registry],
  }),
  grpcDuration: new client.Histogram({
    name: 'svc_grpc_server_handling_seconds',
    help: 'Time a gRPC call took in this process (unary; streams until their last message)',
    labelNames: ['method'] as const,
    buckets: SECONDS,
    registers: [registry],
  }),
  readCache: new client.Counter({
    name: 'svc_gateway_read_cache_total',
    help: "Reads the gateway's caches saw, by cache (tenants, projects) and outcome (hit; miss: loaded from the service; bypass: the feed is not being read)",
    labelNames: ['cache', 'outcome'] as const,
    registers: [registry],
  }),
  outboxPublished: new client.Counter({
    name: 'svc_outbox_events_published_total',
    help: 'Domain events the outbox relay handed to the bus',
    registers: [registry],
  }),
  outboxLag: new client.Gauge({
    name: 'svc_outbox_lag_seconds',
    help: 'Age of the oldest event in the last batch the relay published (0 when idle)',
    registers: [registry],
  }),
  busHandled: new client.Counter({
    name: 'svc_bus_messages_handled_total',
    help: 'Bus messages given to a handler, by topic, consumer group and outcome (ok; retry: a dependency was unavailable, retried without limit; poison: the message is bad, retried up to BUS_MAX_ATTEMPTS; dead_letter)',
    labelNames: ['topic', 'group', 'outcome'] as const,
    registers: [registry],
  }),
  busLag: new client.Gauge({
    name: 'svc_bus_consumer_lag_seconds',
    help: "Age of the last message a consumer group's handler got in this process, by topic and group (publish time to handling)",
    labelNames: ['topic', 'group'] as const,
    registers: [registry],
  }),
  busStalled: new client.Gauge({
    name: 'svc_bus_consumer_stalled',
    help: 'Partitions of a consumer group in this process whose handler is retrying a message on an unavailable dependency (the messages behind it wait), by topic and group',
    labelNames: ['topic', 'group'] as const,
    registers: [registry],
  }),
  healthServing: new client.Gauge({
    name: 'svc_health_serving',
    help: "1 while the process's health check (grpc.health.v1 name; '' is the whole service) is SERVING, 0 while it is not",
    labelNames: ['check'] as const,
    registers: [registry],
  }),
};

let defaultsStarted = false;

/** The text exposition of every metric of this process; starts the process metrics on first use. */
export async function metricsText(): Promise<{ contentType: string; body: string }> {
  if (!defaultsStarted) {
    defaultsStarted = true;
    client.collectDefaultMetrics({ register: registry, prefix: METRIC_PREFIX, eventLoopMonitoringPrecision: 20 });
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
