/**
 * Offline structural validation of the rendered Kubernetes objects, beside kubernetes-models (the API's own OpenAPI
 * schemas, which leave objects open: an unknown field passes there). These are JSON Schemas of the subset of each
 * kind the manifests use, written from the Kubernetes API reference: closed objects (a misspelt or misplaced field
 * fails), the right types, the required fields. A field the manifests start to use must be added here, which is the
 * point: it gets looked up once.
 */
type Schema = Record<string, unknown>;

const str: Schema = { type: 'string', minLength: 1 };
const int: Schema = { type: 'integer', minimum: 0 };
const bool: Schema = { type: 'boolean' };
const strMap: Schema = { type: 'object', additionalProperties: { type: 'string' } };
const quantity: Schema = { anyOf: [{ type: 'string', pattern: '^[0-9.]+(m|Ki|Mi|Gi|Ti|k|M|G)?$' }, { type: 'number' }] };
const intOrName: Schema = {
  anyOf: [
    { type: 'integer', minimum: 1, maximum: 65535 },
    { type: 'string', pattern: '^[a-z]([-a-z0-9]{0,13})$' },
  ],
};
const arr = (items: Schema, minItems = 0): Schema => ({ type: 'array', items, minItems });
/** A closed object: only these fields. */
const obj = (properties: Record<string, Schema>, required: string[] = []): Schema => ({
  type: 'object',
  properties,
  required,
  additionalProperties: false,
});

const dnsName = { type: 'string', pattern: '^[a-z0-9]([-a-z0-9]*[a-z0-9])?$', maxLength: 63 };
const metadata = obj({ name: dnsName, namespace: dnsName, labels: strMap, annotations: strMap }, ['name']);
const labelSelector = obj({
  matchLabels: strMap,
  matchExpressions: arr(
    obj({ key: str, operator: { enum: ['In', 'NotIn', 'Exists', 'DoesNotExist'] }, values: arr({ type: 'string' }) }, ['key', 'operator']),
  ),
});
const resourceList = obj({ cpu: quantity, memory: quantity, 'ephemeral-storage': quantity });
const probe = obj({
  grpc: obj({ port: { type: 'integer', minimum: 1, maximum: 65535 }, service: { type: 'string' } }, ['port']),
  httpGet: obj({ path: str, port: intOrName, scheme: { enum: ['HTTP', 'HTTPS'] } }, ['port']),
  tcpSocket: obj({ port: intOrName }, ['port']),
  initialDelaySeconds: int,
  periodSeconds: { type: 'integer', minimum: 1 },
  timeoutSeconds: { type: 'integer', minimum: 1 },
  failureThreshold: { type: 'integer', minimum: 1 },
  successThreshold: { type: 'integer', minimum: 1 },
});
const seccomp = obj({ type: { enum: ['RuntimeDefault', 'Localhost', 'Unconfined'] }, localhostProfile: str }, ['type']);
const keyRef = obj({ name: str, key: str, optional: bool }, ['key']);
const envVar = obj(
  {
    name: { type: 'string', pattern: '^[A-Za-z_][A-Za-z0-9_]*$' },
    value: { type: 'string' },
    valueFrom: obj({ secretKeyRef: keyRef, configMapKeyRef: keyRef, fieldRef: obj({ fieldPath: str, apiVersion: str }, ['fieldPath']) }),
  },
  ['name'],
);
const handler = obj({
  exec: obj({ command: arr(str, 1) }, ['command']),
  httpGet: obj({ path: str, port: intOrName }, ['port']),
  sleep: obj({ seconds: int }, ['seconds']),
});
const container = obj(
  {
    name: dnsName,
    image: str,
    imagePullPolicy: { enum: ['Always', 'IfNotPresent', 'Never'] },
    command: arr({ type: 'string' }, 1),
    args: arr({ type: 'string' }),
    ports: arr(
      obj(
        {
          name: { type: 'string', pattern: '^[a-z]([-a-z0-9]{0,13})$' },
          containerPort: { type: 'integer', minimum: 1, maximum: 65535 },
          protocol: { enum: ['TCP', 'UDP', 'SCTP'] },
        },
        ['containerPort'],
      ),
    ),
    env: arr(envVar),
    envFrom: arr(
      obj({
        configMapRef: obj({ name: str, optional: bool }, ['name']),
        secretRef: obj({ name: str, optional: bool }, ['name']),
        prefix: str,
      }),
    ),
    resources: obj({ requests: resourceList, limits: resourceList }),
    securityContext: obj({
      runAsNonRoot: bool,
      runAsUser: int,
      runAsGroup: int,
      readOnlyRootFilesystem: bool,
      allowPrivilegeEscalation: bool,
      capabilities: obj({ drop: arr(str), add: arr(str) }),
      seccompProfile: seccomp,
    }),
    lifecycle: obj({ preStop: handler, postStart: handler }),
    startupProbe: probe,
    readinessProbe: probe,
    livenessProbe: probe,
    volumeMounts: arr(obj({ name: str, mountPath: { type: 'string', pattern: '^/' }, readOnly: bool }, ['name', 'mountPath'])),
  },
  ['name', 'image'],
);
const podSpec = obj(
  {
    serviceAccountName: dnsName,
    automountServiceAccountToken: bool,
    terminationGracePeriodSeconds: int,
    restartPolicy: { enum: ['Always', 'OnFailure', 'Never'] },
    securityContext: obj({ runAsNonRoot: bool, runAsUser: int, runAsGroup: int, fsGroup: int, seccompProfile: seccomp }),
    topologySpreadConstraints: arr(
      obj(
        {
          maxSkew: { type: 'integer', minimum: 1 },
          topologyKey: str,
          whenUnsatisfiable: { enum: ['DoNotSchedule', 'ScheduleAnyway'] },
          labelSelector,
        },
        ['maxSkew', 'topologyKey', 'whenUnsatisfiable'],
      ),
    ),
    containers: arr(container, 1),
    imagePullSecrets: arr(obj({ name: dnsName }, ['name'])),
    volumes: arr(
      obj(
        {
          name: dnsName,
          emptyDir: obj({ sizeLimit: quantity, medium: { type: 'string' } }),
          secret: obj({ secretName: dnsName, items: arr(obj({ key: str, path: str }, ['key', 'path'])), defaultMode: int }, ['secretName']),
        },
        ['name'],
      ),
    ),
  },
  ['containers'],
);
const top = (apiVersion: string, kind: string, spec: Schema | null, extra: Record<string, Schema> = {}): Schema =>
  obj({ apiVersion: { const: apiVersion }, kind: { const: kind }, metadata, ...(spec ? { spec } : {}), ...extra }, [
    'apiVersion',
    'kind',
    'metadata',
    ...(spec ? ['spec'] : []),
  ]);

const npPeer = obj({
  podSelector: labelSelector,
  namespaceSelector: labelSelector,
  ipBlock: obj({ cidr: str, except: arr(str) }, ['cidr']),
});
const npPorts = arr(obj({ protocol: { enum: ['TCP', 'UDP', 'SCTP'] }, port: intOrName, endPort: { type: 'integer' } }));

/** Kind -> schema of the whole object. */
export const K8S_SHAPES: Record<string, Schema> = {
  Namespace: top('v1', 'Namespace', null),
  ServiceAccount: top('v1', 'ServiceAccount', null, { automountServiceAccountToken: bool }),
  ConfigMap: top('v1', 'ConfigMap', null, { data: strMap }),
  Service: top(
    'v1',
    'Service',
    obj(
      {
        type: { enum: ['ClusterIP', 'NodePort', 'LoadBalancer'] },
        // 'None': headless (DNS lists every ready pod).
        clusterIP: { type: 'string' },
        selector: strMap,
        ports: arr(
          obj(
            {
              name: dnsName,
              port: { type: 'integer', minimum: 1, maximum: 65535 },
              targetPort: intOrName,
              protocol: { enum: ['TCP', 'UDP'] },
            },
            ['port'],
          ),
          1,
        ),
      },
      ['selector', 'ports'],
    ),
  ),
  Deployment: top(
    'apps/v1',
    'Deployment',
    obj(
      {
        replicas: int,
        selector: labelSelector,
        strategy: obj({
          type: { enum: ['RollingUpdate', 'Recreate'] },
          rollingUpdate: obj({ maxSurge: intOrName, maxUnavailable: intOrName }),
        }),
        template: obj({ metadata: obj({ labels: strMap, annotations: strMap }), spec: podSpec }, ['metadata', 'spec']),
      },
      ['selector', 'template'],
    ),
  ),
  Job: top(
    'batch/v1',
    'Job',
    obj(
      {
        backoffLimit: int,
        activeDeadlineSeconds: { type: 'integer', minimum: 1 },
        ttlSecondsAfterFinished: int,
        template: obj({ metadata: obj({ labels: strMap, annotations: strMap }), spec: podSpec }, ['spec']),
      },
      ['template'],
    ),
  ),
  HorizontalPodAutoscaler: top(
    'autoscaling/v2',
    'HorizontalPodAutoscaler',
    obj(
      {
        scaleTargetRef: obj({ apiVersion: str, kind: str, name: dnsName }, ['kind', 'name']),
        minReplicas: { type: 'integer', minimum: 1 },
        maxReplicas: { type: 'integer', minimum: 1 },
        metrics: arr(
          obj(
            {
              type: { const: 'Resource' },
              resource: obj(
                {
                  name: { enum: ['cpu', 'memory'] },
                  target: obj({ type: { const: 'Utilization' }, averageUtilization: { type: 'integer', minimum: 1, maximum: 100 } }, [
                    'type',
                    'averageUtilization',
                  ]),
                },
                ['name', 'target'],
              ),
            },
            ['type', 'resource'],
          ),
          1,
        ),
        behavior: obj({ scaleDown: obj({ stabilizationWindowSeconds: int }), scaleUp: obj({ stabilizationWindowSeconds: int }) }),
      },
      ['scaleTargetRef', 'maxReplicas'],
    ),
  ),
  PodDisruptionBudget: top('policy/v1', 'PodDisruptionBudget', {
    ...obj(
      {
        minAvailable: intOrName,
        maxUnavailable: { anyOf: [int, { type: 'string', pattern: '^[0-9]+%$' }] },
        unhealthyPodEvictionPolicy: { enum: ['IfHealthyBudget', 'AlwaysAllow'] },
        selector: labelSelector,
      },
      ['selector'],
    ),
    // Exactly one of them.
    oneOf: [{ required: ['minAvailable'] }, { required: ['maxUnavailable'] }],
  }),
  NetworkPolicy: top(
    'networking.k8s.io/v1',
    'NetworkPolicy',
    obj(
      {
        podSelector: labelSelector,
        policyTypes: arr({ enum: ['Ingress', 'Egress'] }, 1),
        ingress: arr(obj({ from: arr(npPeer), ports: npPorts })),
        egress: arr(obj({ to: arr(npPeer), ports: npPorts })),
      },
      ['podSelector'],
    ),
  ),
  Ingress: top(
    'networking.k8s.io/v1',
    'Ingress',
    obj(
      {
        ingressClassName: str,
        tls: arr(obj({ hosts: arr(str), secretName: str })),
        rules: arr(
          obj(
            {
              host: str,
              http: obj(
                {
                  paths: arr(
                    obj(
                      {
                        path: { type: 'string', pattern: '^/' },
                        pathType: { enum: ['Prefix', 'Exact', 'ImplementationSpecific'] },
                        backend: obj({ service: obj({ name: dnsName, port: obj({ name: str, number: int }) }, ['name', 'port']) }, [
                          'service',
                        ]),
                      },
                      ['pathType', 'backend'],
                    ),
                    1,
                  ),
                },
                ['paths'],
              ),
            },
            ['http'],
          ),
          1,
        ),
      },
      ['rules'],
    ),
  ),
};
