import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { client, createKey, eventually, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';
import { startFakeOpenAI } from '@svc/llm/testing';

jest.setTimeout(90_000);

interface Span {
  service: string;
  name: string;
  traceId: string;
  kind: number;
}

/** Spans as the OpenTelemetry console exporter prints them (util.inspect of each finished span). */
function spans(output: string): Span[] {
  return output.split('\n{\n').flatMap((block) => {
    const name = /^ {2}name: '([^']+)'/m.exec(block)?.[1];
    const traceId = /^ {2}traceId: '([0-9a-f]{32})'/m.exec(block)?.[1];
    const service = /'service\.name': '([^']+)'/.exec(block)?.[1];
    const kind = /^ {2}kind: (\d)/m.exec(block)?.[1];
    return name && traceId && service && kind ? [{ name, traceId, service, kind: Number(kind) }] : [];
  });
}

let dataDir: string;
let system: SystemProcess;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-otel-'));
  system = await startSystem({
    DATA_DIR: dataDir,
    OTEL_TRACES_EXPORTER: 'console',
    OTEL_METRICS_EXPORTER: 'none',
    OTEL_LOGS_EXPORTER: 'none',
    OTEL_BSP_SCHEDULE_DELAY: '100',
  });
});
afterAll(async () => {
  await system.kill();
  rmSync(dataDir, { recursive: true, force: true });
});

it('one trace follows a request from the gateway through gRPC into the service, and background polls are not traced', async () => {
  const api = client(system.url);
  const owner = await signUp(api, 'Traced');
  const { key } = await createKey(api, owner.accessToken);
  expect((await api.get('/api/v1/tenant', { token: key })).status).toBe(200);

  let trace: Span[] = [];
  await eventually(async () => {
    const all = spans(system.output());
    const server = all.find((s) => s.service === 'svc-identity' && s.name === 'grpc.identity.v1.IdentityService/GetTenant');
    trace = server ? all.filter((s) => s.traceId === server.traceId) : [];
    // The HTTP server span ends last (after the response), so wait for it.
    return trace.some((s) => s.service === 'svc-gateway' && s.kind === 1);
  }, 20_000);
  // SERVER span (kind 1) of the gateway's HTTP request, its CLIENT gRPC span (kind 2), identity's SERVER span.
  expect(trace).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ service: 'svc-gateway', name: 'GET', kind: 1 }),
      expect.objectContaining({ service: 'svc-gateway', name: 'grpc.identity.v1.IdentityService/GetTenant', kind: 2 }),
      expect.objectContaining({ service: 'svc-identity', name: 'grpc.identity.v1.IdentityService/GetTenant', kind: 1 }),
    ]),
  );
  // The gateway's revocation feed (a watch stream, and a read per notice) never reaches the trace backend.
  expect(spans(system.output()).filter((s) => s.name.includes('Revocations'))).toEqual([]);
});

it('one trace follows a write through the service, its outbox relay and the bus into a consumer', async () => {
  const api = client(system.url);
  const owner = await signUp(api, 'Traced bus');
  const { key } = await createKey(api, owner.accessToken);
  expect((await api.post('/api/v1/projects', { name: 'traced across the bus' }, { token: key })).status).toBe(201);

  let trace: Span[] = [];
  await eventually(async () => {
    const all = spans(system.output());
    const created = all.filter((s) => s.service === 'svc-projects' && s.name === 'grpc.projects.v1.ProjectsService/CreateProject');
    for (const server of created) {
      trace = all.filter((s) => s.traceId === server.traceId);
      // The consumer's span, and the gateway's HTTP span, which ends last (after the response).
      if (
        trace.some((s) => s.service === 'svc-webhooks' && s.name === 'process svc.projects.events') &&
        trace.some((s) => s.service === 'svc-gateway' && s.kind === 1)
      )
        return true;
    }
    return false;
  }, 20_000);
  // The gateway's request, the service's handler, the relay's PRODUCER span (kind 3) and the consumer's (kind 4).
  expect(trace).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ service: 'svc-gateway', name: 'POST', kind: 1 }),
      expect.objectContaining({ service: 'svc-projects', name: 'grpc.projects.v1.ProjectsService/CreateProject', kind: 1 }),
      expect.objectContaining({ service: 'svc-projects', name: 'publish svc.projects.events', kind: 3 }),
      expect.objectContaining({ service: 'svc-webhooks', name: 'process svc.projects.events', kind: 4 }),
    ]),
  );
  expect(system.output()).not.toContain(key);
});

it('the tenant’s LLM key reaches the provider on a chat reply and an agent run, and appears in no log line or span', async () => {
  const secret = 'sk-traced-tenant-key-4f9d2c';
  const fake = await startFakeOpenAI({ apiKey: secret });
  try {
    const api = client(system.url);
    const owner = await signUp(api, 'Keyed');
    const t = { token: owner.accessToken };
    const settings = await api.patch(
      '/api/v1/tenant/settings/llm',
      { provider: 'openai', model: 'gpt-test', baseUrl: fake.url, apiKey: secret },
      t,
    );
    expect(settings.status).toBe(200);
    expect(settings.text).not.toContain(secret);

    const session = (await api.post('/api/v1/chat/sessions', { title: 'keyed' }, t)).body.data.id;
    const posted = await api.post(`/api/v1/chat/sessions/${session}/messages`, { content: 'hello there' }, t);
    expect(posted.status).toBe(202);
    const project = (await api.post('/api/v1/projects', { name: 'keyed' }, t)).body.data.id;
    const agent = (await api.post('/api/v1/agents', { name: 'keyed', systemPrompt: 'p', config: { autonomyLevel: 'manual' } }, t)).body.data
      .id;
    const run = (await api.post(`/api/v1/agents/${agent}/execute`, { goal: 'say hi', projectId: project }, t)).body.data.id;

    let texts = '';
    await eventually(async () => {
      const messages = (await api.get(`/api/v1/chat/sessions/${session}/messages`, t)).body.data;
      const runNow = await api.get(`/api/v1/agents/${agent}/runs/${run}`, t);
      texts = JSON.stringify(messages) + runNow.text;
      return (
        messages.some((m: { role: string; status: string }) => m.role === 'assistant' && m.status === 'completed') &&
        runNow.body.data.status === 'completed'
      );
    }, 30_000);
    expect(texts).toContain('Echo: hello there');
    // Both calls reached the provider with the key (the fake refuses any other), and it went nowhere else.
    const authorized = fake.requests.filter((r) => r.headers.authorization === `Bearer ${secret}`);
    expect(authorized.length).toBeGreaterThanOrEqual(2);
    expect(texts).not.toContain(secret);
    // Each model call is a CLIENT span with the GenAI conventions' attributes (the chat reply's and the run's).
    let modelSpans: string[] = [];
    await eventually(async () => {
      modelSpans = system
        .output()
        .split('\n{\n')
        .filter((block) => /^ {2}name: 'chat gpt-test'/m.test(block));
      return modelSpans.length >= 2;
    }, 20_000);
    for (const block of modelSpans) {
      const attribute = (name: string) => new RegExp(`'${name.replaceAll('.', '\\.')}': ('[^']*'|\\d+)`).exec(block)?.[1];
      expect({
        kind: /^ {2}kind: (\d)/m.exec(block)?.[1],
        service: /'service\.name': '([^']+)'/.exec(block)?.[1],
        operation: attribute('gen_ai.operation.name'),
        provider: attribute('gen_ai.provider.name'),
        requestModel: attribute('gen_ai.request.model'),
        responseModel: attribute('gen_ai.response.model'),
        inputTokens: Number(attribute('gen_ai.usage.input_tokens')) > 0,
        outputTokens: Number(attribute('gen_ai.usage.output_tokens')) > 0,
      }).toEqual({
        kind: '2',
        service: expect.stringMatching(/^svc-(chat|agents)$/),
        operation: "'chat'",
        provider: "'openai'",
        requestModel: "'gpt-test'",
        responseModel: "'gpt-test'",
        inputTokens: true,
        outputTokens: true,
      });
    }
    expect(new Set(modelSpans.map((b) => /'service\.name': '([^']+)'/.exec(b)?.[1]))).toEqual(new Set(['svc-chat', 'svc-agents']));
    await new Promise((r) => setTimeout(r, 300)); // the last spans are exported every 100 ms
    expect(system.output()).toContain('grpc.chat.v1.ChatService/PostMessage'); // spans and logs were written...
    expect(system.output()).not.toContain(secret); // ...and the key is in none of them
  } finally {
    await fake.close();
  }
});

it('secret values and BYOS keys appear in no response, log line or span', async () => {
  const value = 'secret-value-traced-7c1e9a';
  const next = 'secret-value-traced-next-52bb0d';
  const byosSecret = 'byos-secret-key-traced-93af11';
  const api = client(system.url);
  const owner = await signUp(api, 'Sealed');
  const t = { token: owner.accessToken };
  const texts = [
    (await api.post('/api/v1/secrets', { name: 'TRACED', value }, t)).text,
    (await api.put('/api/v1/secrets/TRACED', { value: next }, t)).text,
    (await api.get('/api/v1/secrets/TRACED', t)).text,
    (await api.post('/api/v1/secrets', { name: 'TRACED', value }, t)).text, // 409
    (
      await api.put(
        `/api/v1/regions/storage/${owner.tenantId}`,
        {
          storageMode: 'byos',
          byosProvider: 's3',
          byosEndpoint: 'http://127.0.0.1:9',
          byosBucket: 'traced',
          byosAccessKey: 'AKIATRACED',
          byosSecretKey: byosSecret,
        },
        t,
      )
    ).text,
    (await api.post(`/api/v1/regions/storage/${owner.tenantId}/validate`, undefined, t)).text,
  ];
  expect(JSON.parse(texts[2]).data.version).toBe(2);
  expect(JSON.parse(texts[5]).data.valid).toBe(false); // nothing listens on port 9
  await new Promise((r) => setTimeout(r, 300)); // the last spans are exported every 100 ms
  expect(system.output()).toContain('grpc.identity.v1.IdentityService/UpdateSecret');
  expect(system.output()).toContain('grpc.regions.v1.RegionsService/ValidateStorage');
  for (const s of [value, next, byosSecret]) {
    for (const text of texts) expect(text).not.toContain(s);
    expect(system.output()).not.toContain(s);
  }
});
