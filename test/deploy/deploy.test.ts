/**
 * Offline checks of the deployment files. No cluster and no Docker engine run here, so these assert the
 * invariants that matter: the Helm chart deploy/helm/svc as real Helm lints and renders it (helm-java, one JVM for
 * the file: test/helm/helm.ts), each object against the Kubernetes API schemas (kubernetes-models) and closed
 * structural schemas per kind (k8s-shapes.ts), the network policies against the calls the code makes
 * (code-facts.ts), and docker-compose.yml against the compose-spec JSON schema (a copy in compose-spec.json, from
 * github.com/compose-spec/compose-spec, schema/compose-spec.json at 170098ba07d9, Apache-2.0).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { parse } from 'yaml';
import { loadGatewayConfig } from '../../gateway/src/config';
import { commonConfig, kafkaTopicSettings, loadConfig } from '@svc/kit/config';
import { processFacts, root, servicePorts, stopBudgetMs, type ProcessFacts } from './code-facts';
import { K8S_SHAPES } from './k8s-shapes';
import { allows, type Endpoint, type NetworkPolicy } from './network-policy';
import { helm, type HelmResult } from '../helm/helm';

/** Every process, from the code: the gateway (HTTP) and the gRPC services with their ports. */
const SERVICES: Record<string, number> = servicePorts();
const FACTS: ProcessFacts[] = processFacts();
const facts = (name: string): ProcessFacts => FACTS.find((f) => f.name === name)!;
const PROCESSES = FACTS.map((f) => f.name);
const GATEWAY_PORT = 8080;
const portOf = (name: string): number => (name === 'gateway' ? GATEWAY_PORT : SERVICES[name]);
/** Secrets a process needs, from what its code opens. */
const neededSecrets = (f: ProcessFacts): string[] => [
  ...(f.storeAndBus ? ['MONGODB_URI', 'SVC_MASTER_KEY'] : []),
  ...(f.redis ? ['REDIS_URL'] : []),
];
const SECRET_KEYS = ['MONGODB_URI', 'SVC_MASTER_KEY', 'REDIS_URL', 'SVC_ADMIN_TOKEN'];
const CHART = path.join(root, 'deploy/helm/svc');
/** The chart's value sets, as each render is named: production defaults and the development cluster. */
const VALUE_SETS = ['production', 'dev'];

/**
 * The compiled entry a process's command must start (scripts/build.mjs writes it from `<dir>/src/main.ts`; the jest
 * set-up builds dist/ as the Docker image does).
 */
const distEntry = (name: string) => (name === 'gateway' ? 'dist/gateway.js' : `dist/services/${name}.js`);

/** A command's script: the first argument naming a source file (node [flags] FILE ...). */
const scriptOf = (command: string[] | string | undefined): string | undefined =>
  ([] as string[]).concat(command ?? []).find((a) => /\.(ts|mts|js|mjs|cjs)$/.test(a));

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
  valueFrom?: { secretKeyRef?: { name: string; key: string }; configMapKeyRef?: { name: string }; fieldRef?: { fieldPath: string } };
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
  lifecycle?: { preStop?: { exec?: { command: string[] }; sleep?: { seconds: number } } };
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
        terminationGracePeriodSeconds?: number;
        securityContext?: SecurityContext;
        containers: Container[];
        volumes?: Array<{ name: string; emptyDir?: object; secret?: { secretName: string } }>;
      };
    };
  };
}
interface Service extends K8sObject {
  spec: { clusterIP?: string; selector: Labels; ports: Array<{ name?: string; port: number; targetPort?: number | string }> };
}
interface Hpa extends K8sObject {
  spec: {
    scaleTargetRef: { apiVersion: string; kind: string; name: string };
    minReplicas?: number;
    maxReplicas: number;
    metrics: Array<{ type: string; resource?: { name: string } }>;
  };
}
interface Pdb extends K8sObject {
  spec: { selector: { matchLabels: Labels }; minAvailable?: number | string; maxUnavailable?: number | string };
}
interface ConfigMap extends K8sObject {
  data?: Record<string, string>;
}
interface Job extends K8sObject {
  spec: {
    backoffLimit?: number;
    ttlSecondsAfterFinished?: number;
    template: Deployment['spec']['template'] & { spec: { restartPolicy?: string } };
  };
}

/** The Kafka topic settings the services read from a ConfigMap (their own config code, defaults by NODE_ENV). */
const topicSettingsOf = (data: Record<string, string>) => kafkaTopicSettings(loadConfig(commonConfig, data));
const configMapOf = (objects: K8sObject[], c: Container): Record<string, string> => {
  const name = c.envFrom?.find((e) => e.configMapRef)?.configMapRef?.name;
  return (objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === name) as ConfigMap | undefined)?.data ?? {};
};
/** A container's literal env values (a hook Job gets its settings this way: it runs before the ConfigMap exists). */
const plainEnvOf = (c: Container): Record<string, string> =>
  Object.fromEntries((c.env ?? []).filter((e) => e.value !== undefined).map((e) => [e.name, e.value!]));

/** ajv 8, the gateway's own dependency (the root's ajv is eslint's 6). */
function newAjv(): { validate(schema: object, data: unknown): boolean; errorsText(errors?: unknown): string; errors?: unknown } {
  const load = createRequire(path.join(root, 'gateway/package.json'));
  const mod = load('ajv') as { default: new (opts: object) => ReturnType<typeof newAjv> };
  // The compose schema names its draft-07 meta-schema by a URL ajv does not carry: skip meta-validation.
  return new mod.default({ strict: false, allErrors: true, validateSchema: false });
}

/**
 * The chart as Helm renders it, once for the file (one JVM): the value sets above, plus the options the checks
 * below switch on (network policies off; monitoring, ExternalSecrets and Kafka over TLS with SASL on).
 */
type Rendered = HelmResult<K8sObject>;
let renderedOnce: Rendered | undefined;
const SECURE_KAFKA = {
  'kafka.ssl': 'true',
  'kafka.caSecret.name': 'kafka-ca',
  'kafka.sasl.mechanism': 'scram-sha-512',
  'kafka.sasl.username': 'svc',
  'kafka.sasl.passwordSecret.name': 'kafka-user',
};
function rendered(): Rendered {
  // helm-java's template prints the release's manifest without its hooks (Helm's CLI appends them), so the value
  // sets are rendered with the topics Job as an ordinary resource too, and compared with the hooked render.
  const noHook = { 'kafkaTopics.hook': 'false' };
  renderedOnce ??= helm<K8sObject>(CHART, [
    { name: 'production', namespace: 'svc', set: noHook },
    { name: 'dev', namespace: 'svc-dev', valuesFiles: [path.join(CHART, 'values-dev.yaml')], set: noHook },
    { name: 'hooked', namespace: 'svc' },
    { name: 'no-policies', namespace: 'svc', set: { 'networkPolicy.enabled': 'false' } },
    {
      name: 'options',
      namespace: 'svc',
      set: { 'monitoring.enabled': 'true', 'externalSecrets.enabled': 'true', ...SECURE_KAFKA, ...noHook },
    },
  ]);
  return renderedOnce;
}
const render = (name: string): K8sObject[] => rendered().renders[name];

const matches = (selector: Labels, labels: Labels | undefined): boolean => Object.entries(selector).every(([k, v]) => labels?.[k] === v);

/** Seconds a preStop hook holds the pod before SIGTERM. */
const preStopSeconds = (c: Container): number | undefined => {
  const exec = c.lifecycle?.preStop?.exec?.command;
  if (exec && exec[0] === 'sleep' && exec.length === 2) return Number(exec[1]);
  return c.lifecycle?.preStop?.sleep?.seconds;
};

describe.each(VALUE_SETS)('kubernetes: helm chart, %s values', (values) => {
  let objects: K8sObject[];
  beforeAll(() => {
    objects = render(values);
  });

  // kubernetes-models accepts unknown fields (the API's schemas are open); these closed shapes catch a misspelt one.
  it('renders only kinds with a known shape, each matching it', () => {
    const ajv = newAjv();
    const problems: string[] = [];
    for (const o of objects) {
      const schema = K8S_SHAPES[o.kind];
      if (!schema) problems.push(`${o.kind}/${o.metadata?.name}: no shape in test/deploy/k8s-shapes.ts`);
      else if (!ajv.validate(schema, o)) problems.push(`${o.kind}/${o.metadata.name}: ${ajv.errorsText(ajv.errors)}`);
    }
    expect(problems).toEqual([]);
  });

  it('renders objects the Kubernetes API schemas accept (kubernetes-models: types, required fields, enums)', () => {
    const problems: string[] = [];
    for (const o of objects) {
      try {
        // kubernetes-models/<apiVersion>/<Kind>: the model of that kind, with the API's OpenAPI schema.
        // eslint-disable-next-line @typescript-eslint/no-require-imports
        const Model = require(`kubernetes-models/${o.apiVersion}/${o.kind}`)[o.kind];
        new Model(o).validate();
      } catch (err) {
        problems.push(`${o.kind}/${o.metadata?.name}: ${(err as Error).message}`);
      }
    }
    expect(problems).toEqual([]);
    expect(objects.length).toBeGreaterThan(20);
  });

  it('has a Deployment with probes, resources, a security context, a PDB and an HPA for every process', () => {
    const deployments = objects.filter((o) => o.kind === 'Deployment') as Deployment[];
    expect(deployments.map((d) => d.metadata.name).sort()).toEqual([...PROCESSES].sort());
    for (const d of deployments) {
      const name = d.metadata.name;
      const [c] = d.spec.template.spec.containers;
      expect({ name, probes: [c.readinessProbe, c.livenessProbe].every(Boolean) }).toEqual({ name, probes: true });
      expect({ name, resources: c.resources?.requests && c.resources?.limits ? 'set' : 'missing' }).toEqual({ name, resources: 'set' });
      expect({ name, readOnlyRoot: c.securityContext?.readOnlyRootFilesystem }).toEqual({ name, readOnlyRoot: true });
      const pdbs = (objects.filter((o) => o.kind === 'PodDisruptionBudget') as Pdb[]).filter((p) =>
        matches(p.spec.selector.matchLabels, d.spec.template.metadata.labels),
      );
      expect({ name, pdbs: pdbs.length }).toEqual({ name, pdbs: 1 });
      const hpas = (objects.filter((o) => o.kind === 'HorizontalPodAutoscaler') as Hpa[]).filter(
        (h) => h.spec.scaleTargetRef.name === name,
      );
      expect({ name, hpas: hpas.length }).toEqual({ name, hpas: 1 });
      expect(hpas[0].spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name });
      expect(hpas[0].spec.maxReplicas).toBeGreaterThanOrEqual(hpas[0].spec.minReplicas ?? 1);
      expect({ name, replicas: d.spec.replicas }).toEqual({ name, replicas: undefined }); // the HPA owns the count
    }
  });

  it('creates the Kafka topics with a hook Job running the compiled kafka:topics, on the settings the services read', () => {
    const jobs = objects.filter((o) => o.kind === 'Job') as Job[];
    expect(jobs.map((j) => j.metadata.name)).toEqual(['kafka-topics']);
    const [job] = jobs;
    const pod = job.spec.template.spec;
    const [c] = pod.containers;
    expect(scriptOf(c.command)).toBe('dist/kafka-topics.js');
    expect(existsSync(path.join(root, 'dist/kafka-topics.js'))).toBe(true);
    expect(existsSync(path.join(root, 'scripts/kafka-topics.ts'))).toBe(true);
    // Kafka not reachable yet: the pod is retried; finished Jobs go away so the next apply runs it again.
    expect(pod.restartPolicy).toBe('OnFailure');
    expect(job.spec.ttlSecondsAfterFinished).toBeGreaterThan(0);
    expect(c.securityContext).toMatchObject({
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      capabilities: { drop: ['ALL'] },
    });
    expect(c.resources?.limits?.memory).toBeDefined();
    // The very settings every service pod gets (as env: a hook runs before the release's ConfigMap exists), so the
    // topics are what the services expect.
    const services = (objects.filter((o) => o.kind === 'Deployment') as Deployment[]).filter((d) => facts(d.metadata.name).storeAndBus);
    expect(c.envFrom).toBeUndefined();
    for (const d of services) expect(configMapOf(objects, d.spec.template.spec.containers[0])).toEqual(plainEnvOf(c));
    // Production: no service creates a topic, and min.insync.replicas can be met.
    const settings = topicSettingsOf(plainEnvOf(c));
    expect(plainEnvOf(c).NODE_ENV).toBe('production');
    expect(settings.createTopics).toBe(false);
    expect(settings.minInsyncReplicas).toBeLessThanOrEqual(settings.replicationFactor);
  });

  it('starts every container with its compiled entry, built from a source that exists', () => {
    for (const d of objects.filter((o) => o.kind === 'Deployment') as Deployment[]) {
      for (const c of d.spec.template.spec.containers) {
        const script = scriptOf(c.command);
        const source = path.join(root, facts(d.metadata.name).dir, 'src/main.ts');
        expect({
          deployment: d.metadata.name,
          script,
          exists: script !== undefined && existsSync(path.join(root, script)),
          source: existsSync(source),
        }).toEqual({ deployment: d.metadata.name, script: distEntry(d.metadata.name), exists: true, source: true });
      }
    }
  });
});

describe('kubernetes: helm chart, dev values in namespace svc-dev', () => {
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
    objects = render('dev');
    deployments = byKind<Deployment>('Deployment');
    services = byKind<Service>('Service');
  });

  it('renders well-formed objects in one namespace', () => {
    expect(objects.length).toBeGreaterThan(0);
    for (const o of objects) {
      expect(typeof o.apiVersion).toBe('string');
      expect(typeof o.kind).toBe('string');
      expect(o.metadata?.name).toMatch(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/);
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
    /** A setting as the container sees it: its own env first, then its ConfigMap. */
    const setting = (key: string): string | undefined => {
      const [c] = deployment(name).spec.template.spec.containers;
      const cmName = c.envFrom?.find((e) => e.configMapRef)?.configMapRef?.name;
      const cm = (objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name === cmName) as ConfigMap | undefined)?.data ?? {};
      return c.env?.find((e) => e.name === key)?.value ?? cm[key];
    };

    it('selects its own pods and runs as its ServiceAccount', () => {
      const d = deployment(name);
      expect(matches(d.spec.selector.matchLabels, d.spec.template.metadata.labels)).toBe(true);
      expect(d.spec.template.spec.serviceAccountName).toBe(name);
    });

    it('starts its own entry point', () => {
      const [c] = deployment(name).spec.template.spec.containers;
      expect(scriptOf(c.command)).toBe(distEntry(name));
      expect(c.env?.find((e) => e.name === 'OTEL_SERVICE_NAME')?.value).toBe(name);
    });

    it("finds every replica of each peer it calls: dns:/// on that peer's headless Service and port", () => {
      for (const peer of facts(name).calls) {
        const key = `${peer.toUpperCase()}_ADDR`;
        const value = setting(key);
        const svc = services.find((s) => s.metadata.name === peer);
        // grpc-js's dns resolver gets every pod's address and round robin spreads calls over them (kit's client).
        expect({ key, value }).toEqual({ key, value: `dns:///${peer}:${svc?.spec.ports[0].port}` });
        expect(svc?.spec.ports[0].port).toBe(SERVICES[peer]);
        expect({ peer, clusterIP: svc?.spec.clusterIP }).toEqual({ peer, clusterIP: 'None' });
      }
    });

    if (!isGateway)
      it('closes client connections after an age, with a grace for the calls still running on them', () => {
        const age = Number(setting('GRPC_MAX_CONNECTION_AGE_MS'));
        const grace = Number(setting('GRPC_MAX_CONNECTION_AGE_GRACE_MS'));
        expect(age).toBeGreaterThan(0);
        expect(age).toBeLessThanOrEqual(10 * 60_000); // an HPA's new pod gets traffic within minutes
        // A chat reply (CHAT_LLM_TIMEOUT_MS 60 s, 2 retries) ends well inside the grace.
        expect(grace).toBeGreaterThanOrEqual(5 * 60_000);
      });

    it('waits for its endpoints to be removed, then has time for its graceful stop', () => {
      const pod = deployment(name).spec.template.spec;
      const [c] = pod.containers;
      const preStop = preStopSeconds(c);
      expect(preStop).toBeGreaterThanOrEqual(3);
      if (c.lifecycle?.preStop?.exec) expect(c.lifecycle.preStop.exec.command[0]).toBe('sleep'); // in the image's Debian base (node:*-bookworm-slim)
      // Kubernetes counts the preStop hook inside terminationGracePeriodSeconds, then SIGKILLs.
      expect(pod.terminationGracePeriodSeconds).toBeGreaterThanOrEqual(preStop! + Math.ceil(stopBudgetMs(name) / 1000));
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

    it('takes the secrets its code uses (and no others) from svc-secrets, settings from the generated ConfigMap', () => {
      const [c] = deployment(name).spec.template.spec.containers;
      for (const key of SECRET_KEYS) {
        const v = c.env?.find((e) => e.name === key);
        if (!v) continue; // SVC_ADMIN_TOKEN: the gateway and billing only
        expect(v.value).toBeUndefined();
        expect(v.valueFrom?.secretKeyRef).toEqual(expect.objectContaining({ name: 'svc-secrets', key }));
      }
      const required = neededSecrets(facts(name));
      const given = (c.env ?? []).filter(
        (e) => e.valueFrom?.secretKeyRef && !(e.valueFrom.secretKeyRef as { optional?: boolean }).optional,
      );
      expect(given.map((e) => e.name).sort()).toEqual([...required].sort());
      const cm = c.envFrom?.find((e) => e.configMapRef)?.configMapRef?.name;
      expect(cm).toMatch(/^svc-config-/);
      expect(objects.some((o) => o.kind === 'ConfigMap' && o.metadata.name === cm)).toBe(true);
    });
  });

  it('commits no Secret values', () => {
    expect(objects.filter((o) => o.kind === 'Secret')).toEqual([]);
  });

  it('trusts X-Forwarded-For from the ingress controller only: the gateway sees the client address', () => {
    const [c] = deployment('gateway').spec.template.spec.containers;
    const trustProxy = c.env?.find((e) => e.name === 'TRUST_PROXY')?.value;
    // The gateway's own config parser, then Fastify's rule for it (proxy-addr): a hop inside the cluster is believed.
    const config = loadGatewayConfig({ TRUST_PROXY: trustProxy });
    expect(config.trustProxy?.length).toBeGreaterThan(0);
    const load = createRequire(path.join(root, 'gateway/package.json'));
    const proxyaddr = load('@fastify/proxy-addr') as ((req: object, trust: unknown) => string) & { compile(list: string[]): unknown };
    const trust = proxyaddr.compile(config.trustProxy!);
    const via = (remote: string, xff: string) =>
      proxyaddr({ socket: { remoteAddress: remote }, headers: { 'x-forwarded-for': xff } }, trust);
    expect(via('10.244.3.7', '203.0.113.9')).toBe('203.0.113.9'); // ingress pod -> the client
    expect(via('203.0.113.50', '198.51.100.1')).toBe('203.0.113.50'); // a direct caller cannot claim another address
  });

  describe('network policies match the calls the code makes', () => {
    let policies: NetworkPolicy[];
    const podIp = (i: number) => `10.244.1.${10 + i}`;
    const podOf = (name: string): Endpoint => {
      const d = deployment(name);
      const ports = Object.fromEntries((d.spec.template.spec.containers[0].ports ?? []).map((p) => [p.name ?? '', p.containerPort]));
      return { ip: podIp(PROCESSES.indexOf(name)), pod: { namespace: 'svc-dev', labels: d.spec.template.metadata.labels, ports } };
    };
    const outside = (ip: string): Endpoint => ({ ip });
    const ingressController: Endpoint = {
      ip: '10.244.9.9',
      pod: { namespace: 'ingress-nginx', labels: { 'app.kubernetes.io/name': 'ingress-nginx' } },
    };
    const strangerPod: Endpoint = { ip: '10.244.9.10', pod: { namespace: 'other', labels: { app: 'gateway' } } };

    beforeAll(() => {
      policies = byKind('NetworkPolicy') as unknown as NetworkPolicy[];
    });

    it('denies everything by default', () => {
      const deny = policies.find((p) => Object.keys(p.spec.podSelector).length === 0 && !p.spec.ingress && !p.spec.egress);
      expect(deny?.spec.policyTypes?.sort()).toEqual(['Egress', 'Ingress']);
    });

    it('allows exactly the gRPC calls derived from the <PEER>_ADDR settings, and no other between processes', () => {
      const allowed: string[] = [];
      const expected: string[] = [];
      for (const from of PROCESSES)
        for (const to of PROCESSES) {
          if (from === to) continue;
          if (allows(policies, podOf(from), podOf(to), portOf(to))) allowed.push(`${from} -> ${to}`);
          if (facts(from).calls.includes(to)) expected.push(`${from} -> ${to}`);
        }
      expect(allowed.sort()).toEqual(expected.sort());
    });

    it("lets chat replicas reach each other's gRPC port, at the pod address each records (CHAT_PEER_ADDR)", () => {
      const [c] = deployment('chat').spec.template.spec.containers;
      expect(c.env?.find((e) => e.name === 'POD_IP')?.valueFrom?.fieldRef).toEqual({ fieldPath: 'status.podIP' });
      expect(c.env?.find((e) => e.name === 'CHAT_PEER_ADDR')?.value).toBe(`$(POD_IP):${SERVICES.chat}`);
      const other = { ...podOf('chat'), ip: '10.244.2.99' };
      expect(allows(policies, other, podOf('chat'), SERVICES.chat)).toBe(true);
      expect(allows(policies, other, podOf('chat'), 6000)).toBe(false);
    });

    it('lets clients reach the gateway through the ingress controller only', () => {
      expect(allows(policies, ingressController, podOf('gateway'), GATEWAY_PORT)).toBe(true);
      expect(allows(policies, strangerPod, podOf('gateway'), GATEWAY_PORT)).toBe(false);
      expect(allows(policies, outside('203.0.113.9'), podOf('gateway'), GATEWAY_PORT)).toBe(false);
      for (const name of Object.keys(SERVICES)) expect(allows(policies, ingressController, podOf(name), SERVICES[name])).toBe(false);
    });

    it('lets Prometheus in the monitoring namespace scrape every pod at METRICS_PORT, annotated for discovery, and no one else', () => {
      const config = (objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name.startsWith('svc-config')) as ConfigMap).data ?? {};
      const port = Number(config.METRICS_PORT);
      expect({ port, host: config.METRICS_HOST }).toEqual({ port: 9464, host: '0.0.0.0' });
      const prometheus: Endpoint = {
        ip: '10.244.8.8',
        pod: { namespace: 'monitoring', namespaceLabels: { 'kubernetes.io/metadata.name': 'monitoring' }, labels: { app: 'prometheus' } },
      };
      for (const name of PROCESSES) {
        const d = deployment(name) as Deployment & { spec: { template: { metadata: { annotations?: Record<string, string> } } } };
        const declared = d.spec.template.spec.containers[0].ports?.find((p) => p.name === 'metrics')?.containerPort;
        const { annotations = {} } = d.spec.template.metadata;
        expect({ name, declared, scrape: annotations['prometheus.io/scrape'], at: annotations['prometheus.io/port'] }).toEqual({
          name,
          declared: port,
          scrape: 'true',
          at: String(port),
        });
        expect({ name, scraped: allows(policies, prometheus, podOf(name), port) }).toEqual({ name, scraped: true });
        expect({ name, stranger: allows(policies, strangerPod, podOf(name), port) }).toEqual({ name, stranger: false });
      }
    });

    it('lets every process resolve names, and reach the datastores and the collector its code uses', () => {
      const dns: Endpoint = { ip: '10.96.0.10', pod: { namespace: 'kube-system', labels: { 'k8s-app': 'kube-dns' } } };
      const datastore = outside('10.10.0.5'); // outside the namespace; policies open these by port
      for (const f of FACTS) {
        const pod = podOf(f.name);
        const got = {
          dns: allows(policies, pod, dns, 53, 'UDP') && allows(policies, pod, dns, 53, 'TCP'),
          mongodb: allows(policies, pod, datastore, 27017),
          kafka: allows(policies, pod, datastore, 9092),
          redis: allows(policies, pod, datastore, 6379),
          otlp: allows(policies, pod, datastore, 4318),
        };
        expect({ name: f.name, ...got }).toEqual({
          name: f.name,
          dns: true,
          mongodb: f.storeAndBus,
          kafka: f.storeAndBus,
          redis: f.redis,
          otlp: true,
        });
      }
    });

    it('opens the internet to the processes whose code calls out, never private or metadata addresses', () => {
      for (const f of FACTS) {
        const pod = podOf(f.name);
        expect({ name: f.name, internet: allows(policies, pod, outside('93.184.216.34'), 443) }).toEqual({
          name: f.name,
          internet: f.internet,
        });
        for (const ip of ['10.1.2.3', '172.20.0.1', '192.168.1.1', '169.254.169.254', '100.64.0.1', '127.0.0.1'])
          expect({ name: f.name, ip, allowed: allows(policies, pod, outside(ip), 443) }).toEqual({ name: f.name, ip, allowed: false });
      }
    });

    it('lets the kafka-topics Job reach Kafka only, and nothing reach it', () => {
      const job = byKind<Job>('Job').find((j) => j.metadata.name === 'kafka-topics')!;
      const pod: Endpoint = { ip: '10.244.7.7', pod: { namespace: 'svc-dev', labels: job.spec.template.metadata.labels, ports: {} } };
      const datastore = outside('10.10.0.5');
      expect({
        kafka: allows(policies, pod, datastore, 9092),
        mongodb: allows(policies, pod, datastore, 27017),
        internet: allows(policies, pod, outside('93.184.216.34'), 443),
        identity: allows(policies, pod, podOf('identity'), SERVICES.identity),
        fromGateway: allows(policies, podOf('gateway'), pod, 8080),
      }).toEqual({ kafka: true, mongodb: false, internet: false, identity: false, fromGateway: false });
    });
  });

  it('runs the development cluster on one Kafka broker: one replica, topics still from the Job', () => {
    const [job] = byKind<Job>('Job');
    expect(topicSettingsOf(plainEnvOf(job.spec.template.spec.containers[0]))).toMatchObject({
      replicationFactor: 1,
      minInsyncReplicas: 1,
      createTopics: false,
    });
  });

  it('renders without network policies when they are switched off', () => {
    const base = render('no-policies');
    expect(base.some((o) => o.kind === 'NetworkPolicy')).toBe(false);
    expect(base.filter((o) => o.kind === 'Deployment')).toHaveLength(PROCESSES.length);
  });

  it('replicates every topic in production: 3 replicas, a write on 2 before it is acknowledged', () => {
    const base = render('production');
    const config = (base.find((o) => o.kind === 'ConfigMap' && o.metadata.name.startsWith('svc-config')) as ConfigMap).data ?? {};
    expect(topicSettingsOf(config)).toEqual({ numPartitions: 6, replicationFactor: 3, minInsyncReplicas: 2, createTopics: false });
    expect(base.filter((o) => o.kind === 'Job').map((o) => o.metadata.name)).toEqual(['kafka-topics']);
  });
});

describe('kubernetes: helm chart, lint and options', () => {
  let objects: K8sObject[];
  const byKind = <T extends K8sObject>(kind: string): T[] => objects.filter((o) => o.kind === kind) as T[];
  beforeAll(() => {
    objects = render('options');
  });

  it('passes helm lint --strict with no warning', () => {
    const { lint } = rendered();
    expect(lint.failed).toBe(false);
    expect(lint.messages.filter((m) => /\[(WARNING|ERROR)\]/.test(m))).toEqual([]);
  });

  it('runs the topics Job as a Helm hook by default: Helm keeps it out of the manifest, which is otherwise the same', () => {
    const hooked = render('hooked');
    const production = render('production');
    const key = (o: K8sObject) => `${o.kind}/${o.metadata.name}`;
    expect(hooked.some((o) => o.kind === 'Job')).toBe(false);
    expect(hooked.map(key).sort()).toEqual(
      production
        .filter((o) => o.kind !== 'Job')
        .map(key)
        .sort(),
    );
    // The annotations Helm split it by: before the processes of an install or an upgrade start; the previous run's
    // Job replaced, a finished one removed.
    const template = readFileSync(path.join(CHART, 'templates/kafka-topics-job.yaml'), 'utf8');
    expect(template).toContain('helm.sh/hook: pre-install,pre-upgrade');
    expect(template).toContain('helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded');
  });

  it('renders the monitoring pack and the ExternalSecret as their operators define them', () => {
    const problems: string[] = [];
    // The operators' models (kubernetes-models' packages); the ExternalSecret's v1 has v1beta1's fields used here.
    const models: Record<string, () => { validate(): void }> = {
      PodMonitor: () => {
        const { PodMonitor } = require('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PodMonitor'); // eslint-disable-line @typescript-eslint/no-require-imports
        return new PodMonitor(byKind('PodMonitor')[0]);
      },
      PrometheusRule: () => {
        const { PrometheusRule } = require('@kubernetes-models/prometheus-operator/monitoring.coreos.com/v1/PrometheusRule'); // eslint-disable-line @typescript-eslint/no-require-imports
        return new PrometheusRule(byKind('PrometheusRule')[0]);
      },
      ExternalSecret: () => {
        const { ExternalSecret } = require('@kubernetes-models/external-secrets/external-secrets.io/v1beta1/ExternalSecret'); // eslint-disable-line @typescript-eslint/no-require-imports
        return new ExternalSecret({ ...byKind('ExternalSecret')[0], apiVersion: 'external-secrets.io/v1beta1' });
      },
    };
    for (const [kind, model] of Object.entries(models)) {
      expect({ kind, count: byKind(kind).length }).toEqual({ kind, count: 1 });
      try {
        model().validate();
      } catch (err) {
        problems.push(`${kind}: ${(err as Error).message}`);
      }
    }
    expect(problems).toEqual([]);
    expect(byKind<K8sObject & { spec: { target: { name: string } } }>('ExternalSecret')[0].spec.target.name).toBe('svc-secrets');
  });

  it('ships deploy/monitoring as it is: the same alerts (runbook links on the configured base) and dashboard', () => {
    const rules = parse(readFileSync(path.join(root, 'deploy/monitoring/rules.yaml'), 'utf8')) as { groups: unknown[] };
    const rule = byKind<K8sObject & { spec: { groups: unknown[] } }>('PrometheusRule')[0];
    const base = 'https://github.com/your-org/svc/blob/main/docs/runbooks/';
    expect(JSON.parse(JSON.stringify(rule.spec.groups).replaceAll(base, 'docs/runbooks/'))).toEqual(rules.groups);
    expect(JSON.stringify(rule.spec.groups)).toContain(`${base}monitoring.md#`);
    const dashboard = byKind<ConfigMap>('ConfigMap').find((c) => c.metadata.name === 'svc-platform-dashboard');
    expect(dashboard?.metadata.labels?.grafana_dashboard).toBe('1');
    expect(JSON.parse(dashboard?.data?.['svc-platform.json'] ?? '{}')).toEqual(
      JSON.parse(readFileSync(path.join(root, 'deploy/monitoring/dashboard.json'), 'utf8')),
    );
    // Every pod of the release, at its metrics port, with the `app` label the rules group by.
    const monitor = byKind<
      K8sObject & {
        spec: {
          selector: { matchLabels: Labels };
          podMetricsEndpoints: Array<{ port: string; relabelings: Array<{ targetLabel: string }> }>;
        };
      }
    >('PodMonitor')[0];
    for (const d of byKind<Deployment>('Deployment')) {
      expect(matches(monitor.spec.selector.matchLabels, d.spec.template.metadata.labels)).toBe(true);
      expect(d.spec.template.spec.containers[0].ports?.some((p) => p.name === monitor.spec.podMetricsEndpoints[0].port)).toBe(true);
    }
    expect(monitor.spec.podMetricsEndpoints[0].relabelings.map((r) => r.targetLabel)).toEqual(expect.arrayContaining(['app', 'pod']));
  });

  it('connects every Kafka user over TLS with SASL: the CA mounted where KAFKA_SSL_CA_FILE says, the password from its Secret', () => {
    const config = (objects.find((o) => o.kind === 'ConfigMap' && o.metadata.name.startsWith('svc-config')) as ConfigMap).data ?? {};
    expect(config).toMatchObject({ KAFKA_SSL: 'true', KAFKA_SASL_MECHANISM: 'scram-sha-512', KAFKA_SASL_USERNAME: 'svc' });
    const users = [
      ...byKind<Deployment>('Deployment').filter((d) => facts(d.metadata.name).storeAndBus),
      ...(byKind('Job') as unknown as Deployment[]),
    ];
    expect(users.length).toBe(FACTS.filter((f) => f.storeAndBus).length + 1);
    for (const u of users) {
      const pod = u.spec.template.spec;
      const [c] = pod.containers;
      const settings = { ...configMapOf(objects, c), ...plainEnvOf(c) };
      const mount = c.volumeMounts?.find((m) => settings.KAFKA_SSL_CA_FILE?.startsWith(`${m.mountPath}/`));
      expect({ name: u.metadata.name, ca: pod.volumes?.find((v) => v.name === mount?.name)?.secret?.secretName }).toEqual({
        name: u.metadata.name,
        ca: 'kafka-ca',
      });
      expect(c.env?.find((e) => e.name === 'KAFKA_SASL_PASSWORD')?.valueFrom?.secretKeyRef).toEqual({
        name: 'kafka-user',
        key: 'KAFKA_SASL_PASSWORD',
      });
    }
    const [gateway] = byKind<Deployment>('Deployment').filter((d) => d.metadata.name === 'gateway');
    expect(gateway.spec.template.spec.containers[0].env?.some((e) => e.name === 'KAFKA_SASL_PASSWORD')).toBe(false);
  });
});

// ---------------------------------------------------------------------------------------------------------

interface ComposeService {
  image?: string;
  build?: unknown;
  command?: string[] | string;
  environment?: Record<string, string | number | boolean | null> | string[];
  healthcheck?: { test?: string[] | string; disable?: boolean };
  stop_grace_period?: string;
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

/** A copy of the compose-spec JSON schema shipped by a package (e.g. dclint), if one is installed. */
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
  // The processes: built from the root Dockerfile (the collector has its own build under deploy/).
  const apps = Object.fromEntries(Object.entries(all).filter(([, s]) => s.build === '.'));

  it('is a compose-spec file (no version key) with the gateway and every service built from the Dockerfile', () => {
    expect(compose.version).toBeUndefined();
    expect(Object.keys(apps).sort()).toEqual([...PROCESSES].sort());
    expect(new Set(Object.values(apps).map((s) => s.image)).size).toBe(1);
    expect(existsSync(path.join(root, 'Dockerfile'))).toBe(true);
  });

  it.each(PROCESSES)('%s: entry point, healthcheck, memory limit, stop grace and the settings its code needs', (name) => {
    const s = apps[name];
    const f = facts(name);
    const script = scriptOf(s.command);
    expect(script).toBe(distEntry(name));
    expect(existsSync(path.join(root, script!))).toBe(true);
    expect(existsSync(path.join(root, f.dir, 'src/main.ts'))).toBe(true);
    expect(s.healthcheck?.disable).not.toBe(true);
    expect(s.deploy?.resources?.limits?.memory ?? s.mem_limit).toBeDefined();
    // Compose waits stop_grace_period (default 10 s) after SIGTERM before SIGKILL.
    expect(Number(/^(\d+)s$/.exec(s.stop_grace_period ?? '10s')?.[1])).toBeGreaterThanOrEqual(Math.ceil(stopBudgetMs(name) / 1000));
    const env = envOf(s);
    const needed = [
      'OTEL_EXPORTER_OTLP_ENDPOINT',
      ...(f.storeAndBus ? ['MONGODB_URI', 'KAFKA_BROKERS', 'SVC_MASTER_KEY'] : []),
      ...(f.redis ? ['REDIS_URL'] : []),
    ];
    for (const key of needed) expect({ key, set: Boolean(env[key]) }).toEqual({ key, set: true });
    if (!f.storeAndBus)
      for (const key of ['MONGODB_URI', 'SVC_MASTER_KEY']) expect({ key, value: env[key] }).toEqual({ key, value: undefined });
    expect(env.NODE_ENV).toBe('production');
    expect(env.OTEL_SERVICE_NAME).toBe(name);
    if (name === 'gateway') {
      expect(env.HOST).toBe('0.0.0.0');
      expect(String(s.healthcheck?.test)).toContain('/readyz');
    } else {
      const port = SERVICES[name];
      expect(env.SERVICE_HOST).toBe('0.0.0.0');
      expect(env[`${name.toUpperCase()}_PORT`]).toBe(String(port));
      // grpc.health.v1 through the script in the image, on this service's own port (not a TCP connect).
      expect(s.healthcheck?.test).toEqual(['CMD', 'node', 'deploy/grpc-health.mjs', String(port)]);
      expect(existsSync(path.join(root, 'deploy/grpc-health.mjs'))).toBe(true);
    }
    // Peers it calls by <NAME>_ADDR, pointing at the compose service names.
    for (const peer of f.calls) expect(env[`${peer.toUpperCase()}_ADDR`]).toBe(`${peer}:${SERVICES[peer]}`);
  });

  it('has exactly the processes the code has, plus the infrastructure they use', () => {
    expect(Object.keys(all).sort()).toEqual(
      [...PROCESSES, 'kafka', 'mongodb', 'redis', 'otel-collector', 'jaeger', 'prometheus', 'grafana'].sort(),
    );
  });

  it('checks the health of the collector and the trace UI, and starts the collector after Jaeger is healthy', () => {
    const collector = all['otel-collector'] as ComposeService & { build?: { context: string; dockerfile: string } };
    expect(collector.healthcheck?.test).toEqual(expect.arrayContaining(['wget', 'http://127.0.0.1:13133/']));
    expect(existsSync(path.join(root, collector.build!.context, collector.build!.dockerfile))).toBe(true);
    // The collector's health_check extension listens where the check asks.
    const otel = parse(readFileSync(path.join(root, 'deploy/otel-collector.yaml'), 'utf8')) as {
      extensions: { health_check?: { endpoint: string } };
      service: { extensions: string[] };
    };
    expect(otel.extensions.health_check?.endpoint).toMatch(/:13133$/);
    expect(otel.service.extensions).toContain('health_check');
    expect(all.jaeger.healthcheck?.test).toEqual(expect.arrayContaining(['wget', 'http://127.0.0.1:14269/']));
    expect(dependsOf(collector).jaeger).toBe('service_healthy');
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
    // Each process waits for what its code uses, and for the peers it calls (identity first: the others need its keys).
    for (const f of FACTS) {
      const deps = dependsOf(apps[f.name]);
      const needed = [...(f.storeAndBus ? ['mongodb', 'kafka'] : []), ...(f.redis ? ['redis'] : [])];
      for (const dep of needed)
        expect({ name: f.name, dep, condition: deps[dep] }).toEqual({ name: f.name, dep, condition: 'service_healthy' });
      if (f.name !== 'identity' && f.name !== 'gateway') expect(deps.identity).toBe('service_healthy');
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

  it('gives the topics the replication its one Kafka broker allows, created by the services, never by the broker', () => {
    for (const f of FACTS.filter((x) => x.storeAndBus)) {
      // Only these settings: others hold compose interpolations such as ${LOG_LEVEL:-info}.
      const env = Object.entries(envOf(apps[f.name])).filter(([key]) => key === 'NODE_ENV' || key.startsWith('KAFKA_'));
      const settings = topicSettingsOf(Object.fromEntries(env));
      expect({ name: f.name, ...settings }).toEqual({
        name: f.name,
        numPartitions: 6,
        replicationFactor: 1,
        minInsyncReplicas: 1,
        createTopics: true,
      });
    }
    expect(envOf(all.kafka).KAFKA_AUTO_CREATE_TOPICS_ENABLE).toBe('false');
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
    expect(readFileSync(path.join(root, 'deploy/otel-collector.Dockerfile'), 'utf8')).toMatch(
      /^FROM otel\/opentelemetry-collector-contrib:/m,
    );
    expect(all.jaeger.image).toMatch(/^jaegertracing\/all-in-one:/);

    interface Collector {
      exporters: Record<string, { endpoint?: string }>;
      service: { pipelines: Record<string, { receivers: string[]; exporters: string[] }> };
    }
    const otel = parse(readFileSync(path.join(root, 'deploy/otel-collector.yaml'), 'utf8')) as Collector;
    const traces = otel.service.pipelines.traces;
    expect(traces.receivers).toContain('otlp');
    expect(traces.exporters.map((e) => otel.exporters[e]?.endpoint)).toContain('jaeger:4317');
    // Logs and metrics go somewhere that keeps them: a file on a volume, and Prometheus (remote write it accepts).
    const logs = otel.service.pipelines.logs.exporters.map((e) => otel.exporters[e] as { path?: string });
    const logsDir = logs.find((e) => e.path)?.path?.replace(/\/[^/]+$/, '');
    expect((all['otel-collector'] as ComposeService & { volumes?: string[] }).volumes?.some((v) => v.endsWith(`:${logsDir}`))).toBe(true);
    const metrics = otel.service.pipelines.metrics.exporters.map((e) => otel.exporters[e]?.endpoint);
    expect(metrics).toContain('http://prometheus:9090/api/v1/write');
    expect(([] as string[]).concat(all.prometheus.command ?? [])).toContain('--web.enable-remote-write-receiver');
  });

  it('validates against the compose-spec JSON schema', () => {
    // dclint's copy when installed (newer), else the one kept next to this test.
    const schemaPath = findComposeSchema() ?? 'test/deploy/compose-spec.json';
    const ajv = newAjv();
    const schema = JSON.parse(readFileSync(path.join(root, schemaPath), 'utf8')) as object;
    const ok = ajv.validate(schema, compose);
    expect(ok ? '' : ajv.errorsText(ajv.errors)).toBe('');
    // The schema is closed: a misspelt key fails (so the check above can fail).
    expect(ajv.validate(schema, { services: { gateway: { image: 'x', helthcheck: {} } } })).toBe(false);
  });
});
