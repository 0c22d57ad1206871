import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { client, createKey, eventually, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';

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
  // The gateway polls ListRevocations four times a second; none of that reaches the trace backend.
  expect(spans(system.output()).filter((s) => s.name.includes('ListRevocations'))).toEqual([]);
});
