import { startFakeOpenAI } from '@svc/llm/testing';
import { client, eventually, expectError, signUp, type Account, type Client } from '../helpers/http';
import { exposedNames, monitoredMetrics } from '../helpers/promql';
import { startStack, type Stack } from '../helpers/stack';

// Prometheus metrics: the gateway serves them to the operator at /metrics; every process serves them on
// METRICS_PORT when set. In this stack every part runs in one process, so one registry holds them all.
const ADMIN = 'operator-token-for-the-metrics-test-0123';
let stack: Stack;
let api: Client;
let owner: Account;

beforeAll(async () => {
  stack = await startStack({ env: { SVC_ADMIN_TOKEN: ADMIN, METRICS_PORT: '0', RATE_LIMIT_MAX: '5' } });
  api = client(stack.url);
  owner = await signUp(api, 'Metered');
});
afterAll(() => stack.stop());

const scrape = async () => {
  const res = await api.get('/metrics', { token: ADMIN });
  expect(res.status).toBe(200);
  expect(res.headers.get('content-type')).toMatch(/^text\/plain; version=0\.0\.4/);
  return res.text;
};

/** The value of one series in Prometheus text (0 when absent). */
function valueOf(text: string, name: string, labels: Record<string, string>): number {
  const line = text
    .split('\n')
    .find((l) => l.startsWith(`${name}{`) && Object.entries(labels).every(([k, v]) => l.includes(`${k}="${v}"`)));
  return line ? Number(line.slice(line.lastIndexOf(' ') + 1)) : 0;
}

it('is only for the operator', async () => {
  expectError(await api.get('/metrics'), 401, 'UNAUTHORIZED');
  expectError(await api.get('/metrics', { token: owner.accessToken }), 403, 'FORBIDDEN');
});

it('counts requests by route template and status, gRPC calls by method and code, and rate-limit rejections', async () => {
  const before = await scrape();
  const created = await api.post('/api/v1/projects', { name: 'counted' }, { token: owner.accessToken });
  expect(created.status).toBe(201);
  expect((await api.get(`/api/v1/projects/${created.body.data.id}`, { token: owner.accessToken })).status).toBe(200);
  expect((await api.get('/api/v1/projects/prj_missing', { token: owner.accessToken })).status).toBe(404);
  // Read again: from the gateway's cache this time.
  expect((await api.get(`/api/v1/projects/${created.body.data.id}`, { token: owner.accessToken })).status).toBe(200);
  let limited = 0;
  for (let i = 0; i < 8; i++) if ((await api.get('/api/v1/tenant', { token: owner.accessToken })).status === 429) limited++;
  expect(limited).toBeGreaterThan(0);
  const after = await scrape();
  const moved = (name: string, labels: Record<string, string>) => valueOf(after, name, labels) - valueOf(before, name, labels);

  expect(moved('svc_http_requests_total', { method: 'POST', route: '/api/v1/projects', status: '201' })).toBe(1);
  expect(moved('svc_http_requests_total', { method: 'GET', route: '/api/v1/projects/:id', status: '200' })).toBe(2);
  expect(moved('svc_http_requests_total', { method: 'GET', route: '/api/v1/projects/:id', status: '404' })).toBe(1);
  expect(moved('svc_http_request_duration_seconds_count', { method: 'POST', route: '/api/v1/projects', status: '201' })).toBe(1);
  expect(moved('svc_grpc_server_handled_total', { method: '/projects.v1.ProjectsService/CreateProject', code: 'OK' })).toBe(1);
  expect(moved('svc_grpc_server_handled_total', { method: '/projects.v1.ProjectsService/GetProject', code: 'NOT_FOUND' })).toBe(1);
  expect(moved('svc_rate_limit_rejections_total', { reason: 'rate_limit' })).toBe(limited);
  expect(moved('svc_gateway_read_cache_total', { cache: 'projects', outcome: 'miss' })).toBe(2);
  expect(moved('svc_gateway_read_cache_total', { cache: 'projects', outcome: 'hit' })).toBe(1);
  expect(moved('svc_grpc_server_handled_total', { method: '/projects.v1.ProjectsService/GetProject', code: 'OK' })).toBe(1);
  // No raw ids in labels: one series per route, whatever the id.
  expect(after).not.toContain(created.body.data.id);
  // The process metrics and the event-loop delay are there too, and the outbox and bus series exist.
  for (const name of ['svc_process_cpu_seconds_total', 'svc_nodejs_eventloop_lag_p99_seconds', 'svc_process_resident_memory_bytes'])
    expect(after).toMatch(new RegExp(`^${name} `, 'm'));
  for (const name of [
    'svc_outbox_events_published_total',
    'svc_outbox_lag_seconds',
    'svc_bus_messages_handled_total',
    'svc_llm_tokens_total',
  ])
    expect(after).toContain(`# TYPE ${name}`);
  // The sign-ups' tenant.created reached billing's consumer: its lag has a series (seconds, never negative).
  const lag = /^svc_bus_consumer_lag_seconds\{topic="([^"]+)",group="billing"\} ([0-9.e-]+)$/m.exec(after);
  expect(lag).not.toBeNull();
  expect(Number(lag![2])).toBeGreaterThanOrEqual(0);
});

it('serves the same text on METRICS_PORT, for every process, without a credential', async () => {
  for (const port of [stack.gateway.metricsPort, stack.services.projects.metricsPort, stack.services.chat.metricsPort]) {
    expect(port).toEqual(expect.any(Number));
    const res = await fetch(`http://127.0.0.1:${port}/metrics`);
    expect(res.status).toBe(200);
    expect(await res.text()).toContain('# TYPE svc_grpc_server_handled_total counter');
    expect((await fetch(`http://127.0.0.1:${port}/other`)).status).toBe(404);
  }
});

it('after a model call, offers every metric the alerts and the dashboard name, and the GenAI histograms by model and provider', async () => {
  // Its own user: RATE_LIMIT_MAX is 5 a window here, and the reply is awaited on the metrics port, not the API.
  const modeller = await signUp(api, 'Modelled');
  const t = { token: modeller.accessToken };
  const fake = await startFakeOpenAI({ apiKey: 'sk-metered' });
  try {
    const settings = await api.patch(
      '/api/v1/tenant/settings/llm',
      { provider: 'openai', model: 'gpt-metered', baseUrl: fake.url, apiKey: 'sk-metered' },
      t,
    );
    expect(settings.status).toBe(200);
    const session = (await api.post('/api/v1/chat/sessions', { title: 'metered' }, t)).body.data.id;
    expect((await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'count me' }, t)).status).toBe(202);
    // The model call has ended once its duration is observed.
    await eventually(
      async () =>
        /^svc_gen_ai_client_operation_duration_seconds_count\{[^}]*gpt-metered[^}]*\} [1-9]/m.test(
          await (await fetch(`http://127.0.0.1:${stack.services.chat.metricsPort}/metrics`)).text(),
        ),
      30_000,
    );
  } finally {
    await fake.close();
  }
  // What Prometheus would scrape: the gateway's and every service's METRICS_PORT.
  const ports = [stack.gateway.metricsPort, ...Object.values(stack.services).map((s) => s.metricsPort)];
  const texts = await Promise.all(ports.map(async (port) => (await fetch(`http://127.0.0.1:${port}/metrics`)).text()));
  const offered = new Set(texts.flatMap((text) => [...exposedNames(text)]));
  // `up` is Prometheus's own series of each target, never a process's.
  const named = monitoredMetrics().filter((m) => m !== 'up');
  expect(named.length).toBeGreaterThan(15);
  expect(named.filter((m) => !offered.has(m))).toEqual([]);
  // One metric system: every series of the processes is svc_.
  expect([...offered].filter((m) => !m.startsWith('svc_'))).toEqual([]);

  const text = texts.join('\n');
  const labels =
    'gen_ai_operation_name="chat",gen_ai_provider_name="openai",gen_ai_request_model="gpt-metered",gen_ai_response_model="gpt-metered"';
  for (const type of ['input', 'output']) {
    const count = new RegExp(`^svc_gen_ai_client_token_usage_count\\{${labels},gen_ai_token_type="${type}"\\} (\\d+)$`, 'm').exec(text);
    expect({ type, calls: Number(count?.[1] ?? 0) >= 1 }).toEqual({ type, calls: true });
  }
  const sum = new RegExp(`^svc_gen_ai_client_token_usage_sum\\{${labels},gen_ai_token_type="output"\\} ([0-9.e+]+)$`, 'm').exec(text);
  expect(Number(sum?.[1])).toBeGreaterThan(0);
  // Every gRPC server's health, for the readiness alert.
  expect(text).toMatch(/^svc_health_serving\{check=""\} 1$/m);
  expect(text).toMatch(new RegExp(`^svc_gen_ai_client_operation_duration_seconds_count\\{${labels},error_type=""\\} [1-9]`, 'm'));
});
