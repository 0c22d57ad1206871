/**
 * Offline checks of the deployment files. No cluster and no Docker engine run here, so these assert the
 * structural invariants that matter: the kustomize dev overlay as kubectl renders it, and docker-compose.yml
 * as parsed YAML (validated against the compose-spec JSON schema when a copy is available locally).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { parse, parseAllDocuments } from 'yaml';

const root = path.resolve(__dirname, '../..');

/** Every process: the gateway (HTTP) and the seven gRPC services with their ports. */
const SERVICES: Record<string, number> = {
  identity: 50051,
  projects: 50052,
  agents: 50053,
  chat: 50054,
  regions: 50055,
  billing: 50056,
  webhooks: 50057,
};
const PROCESSES = ['gateway', ...Object.keys(SERVICES)];
const SECRET_KEYS = ['MONGODB_URI', 'SVC_MASTER_KEY', 'REDIS_URL', 'SVC_ADMIN_TOKEN'];

// ---- Minimal shapes of the Kubernetes fields these checks read. ----
type Labels = Record<string, string>;
interface Meta {
  name: string;
  namespace?: string;
  labels?: Labels;
}
interface K8sObject {
  apiVersion: string;
  kind: string;
  metadata: Meta;
}
interface Probe {
  grpc?: { port: number };
  httpGet?: { path: string; port: number | string };
}
interface SecurityContext {
  runAsNonRoot?: boolean;
  readOnlyRootFilesystem?: boolean;
  allowPrivilegeEscalation?: boolean;
  capabilities?: { drop?: string[] };
  seccompProfile?: { type: string };
}
interface EnvVar {
  name: string;
  value?: string;
  valueFrom?: { secretKeyRef?: { name: string; key: string }; configMapKeyRef?: { name: string } };
}
interface Container {
  name: string;
  image: string;
  command?: string[];
  ports?: Array<{ name?: string; containerPort: number }>;
  env?: EnvVar[];
  envFrom?: Array<{ configMapRef?: { name: string }; secretRef?: { name: string } }>;
  resources?: { requests?: Record<string, string>; limits?: Record<string, string> };
  securityContext?: SecurityContext;
  readinessProbe?: Probe;
  livenessProbe?: Probe;
  volumeMounts?: Array<{ name: string; mountPath: string }>;
}
interface Deployment extends K8sObject {
  spec: {
    replicas?: number;
    selector: { matchLabels: Labels };
    template: {
      metadata: { labels: Labels };
      spec: {
        serviceAccountName?: string;
        securityContext?: SecurityContext;
        containers: Container[];
        volumes?: Array<{ name: string; emptyDir?: object }>;
      };
    };
  };
}
interface Service extends K8sObject {
  spec: { selector: Labels; ports: Array<{ name?: string; port: number; targetPort?: number | string }> };
}
interface Hpa extends K8sObject {
  spec: { scaleTargetRef: { apiVersion: string; kind: string; name: string }; minReplicas?: number; maxReplicas: number };
}

/** Renders a kustomization with kubectl; a missing kubectl is a failure, never a skip. */
function kustomize(dir: string): K8sObject[] {
  let out: string;
  try {
    out = execFileSync('kubectl', ['kustomize', dir], { cwd: root, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  } catch (err) {
    const e = err as NodeJS.ErrnoException & { stderr?: string };
    if (e.code === 'ENOENT') {
      throw new Error('kubectl is not on PATH: these checks render deploy/k8s with `kubectl kustomize` (works offline). Install kubectl.');
    }
    throw new Error(`kubectl kustomize ${dir} failed:\n${e.stderr ?? e.message}`);
  }
  return parseAllDocuments(out)
    .map((doc) => {
      if (doc.errors.length) throw new Error(`kustomize output is not valid YAML: ${doc.errors[0].message}`);
      return doc.toJS() as K8sObject | null;
    })
    .filter((o): o is K8sObject => o !== null);
}

const matches = (selector: Labels, labels: Labels | undefined): boolean => Object.entries(selector).every(([k, v]) => labels?.[k] === v);

describe('kubernetes: kustomize overlays/dev', () => {
  let objects: K8sObject[];
  let deployments: Deployment[];
  let services: Service[];
  const byKind = <T extends K8sObject>(kind: string): T[] => objects.filter((o) => o.kind === kind) as T[];
  const deployment = (name: string): Deployment => {
    const d = deployments.find((x) => x.metadata.name === name);
    if (!d) throw new Error(`no Deployment ${name}`);
    return d;
  };

  beforeAll(() => {
    objects = kustomize('deploy/k8s/overlays/dev');
    deployments = byKind<Deployment>('Deployment');
    services = byKind<Service>('Service');
  });

  it('renders well-formed objects in one namespace', () => {
    expect(objects.length).toBeGreaterThan(0);
    for (const o of objects) {
      expect(typeof o.apiVersion).toBe('string');
      expect(typeof o.kind).toBe('string');
      expect(o.metadata?.name).toMatch(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
      if (o.kind !== 'Namespace')
        expect({ kind: o.kind, name: o.metadata.name, ns: o.metadata.namespace }).toEqual({
          kind: o.kind,
          name: o.metadata.name,
          ns: 'svc-dev',
        });
    }
    const keys = objects.map((o) => `${o.kind}/${o.metadata.name}`);
    expect(new Set(keys).size).toBe(keys.length);
  });

  it('has a Deployment, Service and ServiceAccount for the gateway and all seven services', () => {
    for (const name of PROCESSES) {
      expect(deployments.map((d) => d.metadata.name)).toContain(name);
      expect(services.map((s) => s.metadata.name)).toContain(name);
      expect(byKind('ServiceAccount').map((s) => s.metadata.name)).toContain(name);
    }
  });

  it('runs every container from the same image', () => {
    const images = new Set(deployments.flatMap((d) => d.spec.template.spec.containers.map((c) => c.image)));
    expect([...images]).toEqual(['svc-platform:local']);
  });

  describe.each(PROCESSES)('%s', (name) => {
    const isGateway = name === 'gateway';

    it('selects its own pods and runs as its ServiceAccount', () => {
      const d = deployment(name);
      expect(matches(d.spec.selector.matchLabels, d.spec.template.metadata.labels)).toBe(true);
      expect(d.spec.template.spec.serviceAccountName).toBe(name);
    });

    it('starts the right entry point', () => {
      const [c] = deployment(name).spec.template.spec.containers;
      const entry = isGateway ? 'gateway/src/main.ts' : `services/${name}/src/main.ts`;
      expect(c.command).toEqual(['node', '--import', 'tsx', entry]);
      expect(c.env?.find((e) => e.name === 'OTEL_SERVICE_NAME')?.value).toBe(name);
    });

    it('sets requests and limits for cpu and memory', () => {
      for (const c of deployment(name).spec.template.spec.containers) {
        for (const kind of ['requests', 'limits'] as const) {
          expect(c.resources?.[kind]?.cpu).toBeDefined();
          expect(c.resources?.[kind]?.memory).toBeDefined();
        }
      }
    });

    it('has a locked-down security context', () => {
      const pod = deployment(name).spec.template.spec;
      for (const c of pod.containers) {
        const sc = c.securityContext ?? {};
        expect(sc.runAsNonRoot ?? pod.securityContext?.runAsNonRoot).toBe(true);
        expect(sc.readOnlyRootFilesystem).toBe(true);
        expect(sc.allowPrivilegeEscalation).toBe(false);
        expect(sc.capabilities?.drop).toContain('ALL');
        expect((sc.seccompProfile ?? pod.securityContext?.seccompProfile)?.type).toBe('RuntimeDefault');
        // Writable /tmp from an emptyDir, since the root filesystem is read-only.
        const tmp = c.volumeMounts?.find((m) => m.mountPath === '/tmp');
        expect(tmp).toBeDefined();
        expect(pod.volumes?.find((v) => v.name === tmp?.name)?.emptyDir).toBeDefined();
      }
    });

    it('has readiness and liveness probes on its own port', () => {
      const [c] = deployment(name).spec.template.spec.containers;
      const ports = c.ports ?? [];
      const targets = (p: Probe | undefined) => p?.grpc?.port ?? p?.httpGet?.port;
      for (const probe of [c.readinessProbe, c.livenessProbe]) {
        expect(probe).toBeDefined();
        const port = targets(probe);
        expect(ports.some((p) => p.containerPort === port || (p.name !== undefined && p.name === port))).toBe(true);
      }
      if (isGateway) {
        // Not /readyz: a shared outage (a service, a store, the bus) must not take every gateway out of traffic.
        expect(c.readinessProbe?.httpGet?.path).toBe('/healthz');
        expect(c.livenessProbe?.httpGet?.path).toBe('/healthz');
      } else {
        expect(c.readinessProbe?.grpc?.port).toBe(SERVICES[name]);
        expect(c.livenessProbe?.grpc?.port).toBe(SERVICES[name]);
        expect(c.env?.find((e) => e.name === `${name.toUpperCase()}_PORT`)?.value).toBe(String(SERVICES[name]));
      }
    });

    it('is exposed by a Service whose selector and named port match the pods', () => {
      const d = deployment(name);
      const podLabels = d.spec.template.metadata.labels;
      const [c] = d.spec.template.spec.containers;
      const portName = isGateway ? 'http' : 'grpc';
      const svc = services.find((s) => matches(s.spec.selector, podLabels) && s.spec.ports.some((p) => p.name === portName));
      expect(svc).toBeDefined();
      expect(svc?.metadata.name).toBe(name);
      const port = svc!.spec.ports.find((p) => p.name === portName)!;
      const target = port.targetPort ?? port.port;
      const containerPort = c.ports?.find((p) => p.name === target || p.containerPort === target);
      expect(containerPort).toBeDefined();
      if (!isGateway) expect(containerPort?.containerPort).toBe(SERVICES[name]);
    });

    it('takes secrets from svc-secrets by reference and settings from the generated ConfigMap', () => {
      const [c] = deployment(name).spec.template.spec.containers;
      for (const key of SECRET_KEYS) {
        const v = c.env?.find((e) => e.name === key);
        if (!v) continue; // SVC_ADMIN_TOKEN is the gateway's only
        expect(v.value).toBeUndefined();
        expect(v.valueFrom?.secretKeyRef).toEqual(expect.objectContaining({ name: 'svc-secrets', key }));
      }
      for (const key of ['MONGODB_URI', 'SVC_MASTER_KEY', 'REDIS_URL']) expect(c.env?.map((e) => e.name)).toContain(key);
      const cm = c.envFrom?.find((e) => e.configMapRef)?.configMapRef?.name;
      expect(cm).toMatch(/^svc-config-/);
      expect(objects.some((o) => o.kind === 'ConfigMap' && o.metadata.name === cm)).toBe(true);
    });
  });

  it('commits no Secret values', () => {
    expect(objects.filter((o) => o.kind === 'Secret')).toEqual([]);
  });

  it('autoscales the gateway with an HPA', () => {
    const hpa = byKind<Hpa>('HorizontalPodAutoscaler').find((h) => h.spec.scaleTargetRef.name === 'gateway');
    expect(hpa?.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: 'gateway' });
    expect(hpa!.spec.maxReplicas).toBeGreaterThanOrEqual(hpa!.spec.minReplicas ?? 1);
    expect(deployment('gateway').spec.replicas).toBeUndefined(); // the HPA owns the count
  });

  it('includes the network-policies component (default deny first)', () => {
    const names = byKind('NetworkPolicy').map((p) => p.metadata.name);
    expect(names).toEqual(
      expect.arrayContaining(['default-deny', 'allow-dns', 'gateway-egress-to-services', 'services-egress-to-identity']),
    );
  });

  it('keeps the base usable without the component', () => {
    const base = kustomize('deploy/k8s/base');
    expect(base.some((o) => o.kind === 'NetworkPolicy')).toBe(false);
    expect(base.filter((o) => o.kind === 'Deployment')).toHaveLength(PROCESSES.length);
  });
});

// ---------------------------------------------------------------------------------------------------------

interface ComposeService {
  image?: string;
  build?: unknown;
  command?: string[] | string;
  environment?: Record<string, string | number | boolean | null> | string[];
  healthcheck?: { test?: string[] | string; disable?: boolean };
  depends_on?: Record<string, { condition?: string }> | string[];
  deploy?: { resources?: { limits?: { memory?: string } } };
  mem_limit?: string | number;
}
interface ComposeFile {
  version?: string;
  services: Record<string, ComposeService>;
}

const envOf = (s: ComposeService): Record<string, string> => {
  const env = s.environment ?? {};
  if (Array.isArray(env)) return Object.fromEntries(env.map((kv) => [kv.split('=')[0], kv.split('=').slice(1).join('=')]));
  return Object.fromEntries(Object.entries(env).map(([k, v]) => [k, v === null ? '' : String(v)]));
};
const dependsOf = (s: ComposeService): Record<string, string> => {
  const d = s.depends_on ?? {};
  if (Array.isArray(d)) return Object.fromEntries(d.map((n) => [n, 'service_started']));
  return Object.fromEntries(Object.entries(d).map(([n, v]) => [n, v?.condition ?? 'service_started']));
};

/** A local copy of the compose-spec JSON schema, if some package ships one (e.g. dclint); none is installed on purpose. */
function findComposeSchema(): string | undefined {
  try {
    const out = execFileSync('find', ['node_modules', '-name', 'compose-spec.json', '-not', '-path', '*/.cache/*'], {
      cwd: root,
      encoding: 'utf8',
    });
    return out.split('\n').find(Boolean);
  } catch {
    return undefined;
  }
}

describe('docker-compose.yml', () => {
  const source = readFileSync(path.join(root, 'docker-compose.yml'), 'utf8');
  // Compose resolves `<<:` merge keys; so must the parser.
  const compose = parse(source, { merge: true }) as ComposeFile;
  const all = compose.services;
  const apps = Object.fromEntries(Object.entries(all).filter(([, s]) => s.build !== undefined));

  it('is a compose-spec file (no version key) with the gateway and every service built from the Dockerfile', () => {
    expect(compose.version).toBeUndefined();
    expect(Object.keys(apps).sort()).toEqual([...PROCESSES].sort());
    expect(new Set(Object.values(apps).map((s) => s.image)).size).toBe(1);
    expect(existsSync(path.join(root, 'Dockerfile'))).toBe(true);
  });

  it.each(PROCESSES)('%s: entry point, healthcheck, memory limit and distributed settings', (name) => {
    const s = apps[name];
    const entry = name === 'gateway' ? 'gateway/src/main.ts' : `services/${name}/src/main.ts`;
    expect(s.command).toEqual(['node', '--import', 'tsx', entry]);
    expect(s.healthcheck?.test?.length).toBeGreaterThan(0);
    expect(s.healthcheck?.disable).not.toBe(true);
    expect(s.deploy?.resources?.limits?.memory ?? s.mem_limit).toBeDefined();
    const env = envOf(s);
    for (const key of ['MONGODB_URI', 'KAFKA_BROKERS', 'REDIS_URL', 'OTEL_EXPORTER_OTLP_ENDPOINT', 'SVC_MASTER_KEY'])
      expect(env[key]).toBeTruthy();
    expect(env.NODE_ENV).toBe('production');
    expect(env.OTEL_SERVICE_NAME).toBe(name);
    if (name === 'gateway') {
      expect(env.HOST).toBe('0.0.0.0');
      expect(String(s.healthcheck?.test)).toContain('/readyz');
    } else {
      const port = SERVICES[name];
      expect(env.SERVICE_HOST).toBe('0.0.0.0');
      expect(env[`${name.toUpperCase()}_PORT`]).toBe(String(port));
      expect(String(s.healthcheck?.test)).toContain(String(port)); // the check probes this service's own port
    }
    // Peers by <NAME>_ADDR, pointing at the compose service names.
    for (const [peer, port] of Object.entries(SERVICES)) expect(env[`${peer.toUpperCase()}_ADDR`]).toBe(`${peer}:${port}`);
  });

  it('sets a memory limit on every container', () => {
    for (const [name, s] of Object.entries(all)) {
      expect({ name, memory: s.deploy?.resources?.limits?.memory ?? s.mem_limit }).toEqual({ name, memory: expect.anything() });
    }
  });

  it('depends only on defined services, waiting for health where a healthcheck exists', () => {
    const allowed = ['service_started', 'service_healthy', 'service_completed_successfully'];
    for (const [name, s] of Object.entries(all)) {
      for (const [dep, condition] of Object.entries(dependsOf(s))) {
        expect({ name, dep, defined: dep in all }).toEqual({ name, dep, defined: true });
        expect(allowed).toContain(condition);
        if (condition === 'service_healthy')
          expect({ dep, healthcheck: all[dep].healthcheck?.test !== undefined }).toEqual({ dep, healthcheck: true });
      }
    }
    for (const name of Object.keys(SERVICES)) {
      expect(dependsOf(apps[name])).toEqual(
        expect.objectContaining({ mongodb: 'service_healthy', kafka: 'service_healthy', redis: 'service_healthy' }),
      );
    }
    for (const name of Object.keys(SERVICES)) expect(dependsOf(apps.gateway)[name]).toBe('service_healthy');
  });

  it('has no dependency cycle', () => {
    const state = new Map<string, 'visiting' | 'done'>();
    const visit = (n: string, trail: string[]): void => {
      if (state.get(n) === 'done') return;
      if (state.get(n) === 'visiting') throw new Error(`depends_on cycle: ${[...trail, n].join(' -> ')}`);
      state.set(n, 'visiting');
      for (const d of Object.keys(dependsOf(all[n]))) visit(d, [...trail, n]);
      state.set(n, 'done');
    };
    for (const n of Object.keys(all)) visit(n, []);
  });

  it('runs MongoDB 7 as a single-node replica set that initiates itself', () => {
    const m = all.mongodb;
    expect(m.image).toMatch(/^mongo:7/);
    expect(([] as string[]).concat(m.command ?? []).join(' ')).toContain('--replSet rs0');
    expect(String(m.healthcheck?.test)).toContain('rs.initiate');
    expect(envOf(apps.identity).MONGODB_URI).toContain('replicaSet=rs0');
  });

  it('runs Kafka in KRaft mode, Redis 7, and traces through the collector to Jaeger', () => {
    expect(all.kafka.image).toMatch(/^apache\/kafka:/);
    expect(envOf(all.kafka).KAFKA_PROCESS_ROLES).toBe('broker,controller');
    expect(all.redis.image).toMatch(/^redis:7/);
    expect(all['otel-collector'].image).toMatch(/^otel\/opentelemetry-collector-contrib:/);
    expect(all.jaeger.image).toMatch(/^jaegertracing\/all-in-one:/);

    interface Collector {
      exporters: Record<string, { endpoint?: string }>;
      service: { pipelines: Record<string, { receivers: string[]; exporters: string[] }> };
    }
    const otel = parse(readFileSync(path.join(root, 'deploy/otel-collector.yaml'), 'utf8')) as Collector;
    const traces = otel.service.pipelines.traces;
    expect(traces.receivers).toContain('otlp');
    expect(traces.exporters.map((e) => otel.exporters[e]?.endpoint)).toContain('jaeger:4317');
  });

  const schemaPath = findComposeSchema();
  // No compose-spec schema ships in node_modules today and nothing is installed for it: the check runs
  // as soon as a package (e.g. dclint) brings a copy, and is skipped until then.
  (schemaPath ? it : it.skip)('validates against the compose-spec JSON schema', () => {
    const load = createRequire(__filename);
    const mod = load('ajv') as { default?: unknown };
    const AjvClass = (mod.default ?? mod) as new (opts: object) => {
      validate(schema: object, data: unknown): boolean;
      errorsText(errors?: unknown): string;
      errors?: unknown;
    };
    // ajv 8 (default export) and ajv 6 name the "ignore unknown formats" option differently.
    const ajv = new AjvClass(mod.default ? { strict: false, allErrors: true } : { unknownFormats: 'ignore', allErrors: true });
    const schema = JSON.parse(readFileSync(path.join(root, schemaPath!), 'utf8')) as object;
    const ok = ajv.validate(schema, compose);
    expect(ok ? '' : ajv.errorsText(ajv.errors)).toBe('');
  });
});
