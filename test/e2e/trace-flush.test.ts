import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { client, createKey, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';

// What a support engineer follows: the system exports its spans over OTLP/HTTP protobuf (the exporter OTEL_EXPORTER_
// OTLP_ENDPOINT gives it, as deploy/ configures it) to a real receiver in this test. The batch processor's delay is
// set far beyond the test, so a span arrives only if the graceful stop on SIGTERM flushes it.

jest.setTimeout(120_000);

/* eslint-disable @typescript-eslint/no-require-imports -- the OTLP protobuf types the SDK's own exporter encodes with */
const otlp = require('@opentelemetry/otlp-transformer/build/src/generated/root') as {
  opentelemetry: { proto: { collector: { trace: { v1: { ExportTraceServiceRequest: ProtoType } } } } };
};
/* eslint-enable @typescript-eslint/no-require-imports */
interface ProtoType {
  decode(bytes: Uint8Array): unknown;
  toObject(message: unknown, options: { longs: typeof String; bytes: typeof String }): ExportRequest;
}
interface KeyValue {
  key: string;
  value: { stringValue?: string; intValue?: string };
}
interface ExportRequest {
  resourceSpans?: Array<{
    resource?: { attributes?: KeyValue[] };
    scopeSpans?: Array<{
      spans?: Array<{ traceId: string; spanId: string; parentSpanId?: string; name: string; kind: number; attributes?: KeyValue[] }>;
    }>;
  }>;
}
interface ReceivedSpan {
  service: string;
  traceId: string;
  spanId: string;
  parentSpanId: string;
  name: string;
  kind: number;
  attributes: Record<string, string>;
}

const hex = (base64: string | undefined) => Buffer.from(base64 ?? '', 'base64').toString('hex');
const attrs = (list: KeyValue[] | undefined) =>
  Object.fromEntries((list ?? []).map((a) => [a.key, a.value.stringValue ?? a.value.intValue ?? '']));

/** An OTLP/HTTP receiver: POST /v1/traces with protobuf bodies, every span kept. */
function startReceiver(): Promise<{ server: Server; url: string; spans: ReceivedSpan[] }> {
  const spans: ReceivedSpan[] = [];
  const Request = otlp.opentelemetry.proto.collector.trace.v1.ExportTraceServiceRequest;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.url === '/v1/traces') {
        const body = Request.toObject(Request.decode(Buffer.concat(chunks)), { longs: String, bytes: String });
        for (const rs of body.resourceSpans ?? []) {
          const service = attrs(rs.resource?.attributes)['service.name'];
          for (const ss of rs.scopeSpans ?? [])
            for (const s of ss.spans ?? [])
              spans.push({
                service,
                traceId: hex(s.traceId),
                spanId: hex(s.spanId),
                parentSpanId: hex(s.parentSpanId),
                name: s.name,
                kind: s.kind,
                attributes: attrs(s.attributes),
              });
        }
      }
      res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end();
    });
  });
  return new Promise((ok) =>
    server.listen(0, '127.0.0.1', () => ok({ server, url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, spans })),
  );
}

let receiver: Awaited<ReturnType<typeof startReceiver>>;
let dataDir: string;
let system: SystemProcess;

beforeAll(async () => {
  receiver = await startReceiver();
  dataDir = mkdtempSync(join(tmpdir(), 'svc-flush-'));
  system = await startSystem({
    DATA_DIR: dataDir,
    // The gateway and one process for the services: two SDKs to start, not eight (on a loaded machine eight took
    // longer than the launcher's minute). Both stop through runMain, as every process does.
    SVC_LAYOUT: 'combined',
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_METRICS_EXPORTER: 'none',
    OTEL_LOGS_EXPORTER: 'none',
    // Ten minutes between exports and batches of up to 100,000: nothing leaves before the stop but what the stop sends.
    OTEL_BSP_SCHEDULE_DELAY: '600000',
    OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '100000',
    OTEL_BSP_MAX_QUEUE_SIZE: '100000',
  });
});
afterAll(async () => {
  if (system.proc.exitCode === null) await system.kill();
  receiver.server.close();
  rmSync(dataDir, { recursive: true, force: true });
});

it('a request, then SIGTERM: every span of it reaches the collector, the request span names tenant, key and request id, and the access log has a line per request', async () => {
  const api = client(system.url);
  const owner = await signUp(api, 'Flushed');
  const { key, id: keyId } = await createKey(api, owner.accessToken);
  const requestId = 'support-case-4711';
  const ok = await api.get('/api/v1/tenant', { token: key, headers: { 'x-request-id': requestId } });
  expect(ok.status).toBe(200);
  const missing = await api.get('/api/v1/projects/prj_missing', { token: key, headers: { 'x-request-id': 'support-case-4712' } });
  expect(missing.status).toBe(404);
  const before = receiver.spans.length;

  expect(await system.stop()).toBe(0);

  // The request's span, found by the request id a customer would quote, with who made it.
  const root = receiver.spans.find((s) => s.service === 'svc-gateway' && s.kind === 2 && s.attributes['svc.request.id'] === requestId);
  expect(root).toBeDefined();
  expect(root!.attributes).toMatchObject({ 'svc.tenant.id': owner.tenantId, 'svc.api_key.id': keyId });
  expect(JSON.stringify(receiver.spans)).not.toContain(key);
  const trace = receiver.spans.filter((s) => s.traceId === root!.traceId);
  // The gateway's gRPC call (CLIENT, 3 in OTLP) and identity's handling of it (SERVER, 2)...
  expect(trace).toEqual(
    expect.arrayContaining([
      expect.objectContaining({ service: 'svc-gateway', kind: 3, name: 'grpc.identity.v1.IdentityService/GetTenant' }),
      expect.objectContaining({
        service: expect.not.stringMatching(/gateway/),
        kind: 2,
        name: 'grpc.identity.v1.IdentityService/GetTenant',
      }),
    ]),
  );
  // ...and every span's parent arrived too: nothing of the request is missing.
  const ids = new Set(trace.map((s) => s.spanId));
  expect(trace.filter((s) => s.parentSpanId && !ids.has(s.parentSpanId))).toEqual([]);
  // The refused request's span carries its ids as well.
  const refused = receiver.spans.find((s) => s.service === 'svc-gateway' && s.attributes['svc.request.id'] === 'support-case-4712');
  expect(refused?.attributes['svc.tenant.id']).toBe(owner.tenantId);
  // The spans came with the stop (none had been exported before it).
  expect(before).toBe(0);

  // One access-log line per request, the 404 included: request id, tenant, key, route pattern, method, status, time.
  const lines = system
    .output()
    .split('\n')
    .filter((l) => l.startsWith('{') && l.includes('"msg":"request"'))
    .map((l) => JSON.parse(l) as Record<string, unknown>);
  expect(lines.find((l) => l.reqId === requestId)).toMatchObject({
    service: 'gateway',
    level: 30,
    tenantId: owner.tenantId,
    apiKeyId: keyId,
    method: 'GET',
    route: '/api/v1/tenant',
    status: 200,
    ms: expect.any(Number),
  });
  expect(lines.find((l) => l.reqId === 'support-case-4712')).toMatchObject({
    tenantId: owner.tenantId,
    route: '/api/v1/projects/:id',
    status: 404,
  });
  expect(lines.filter((l) => l.reqId === requestId)).toHaveLength(1);
});
