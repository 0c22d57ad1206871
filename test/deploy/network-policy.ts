/**
 * A small evaluator of Kubernetes NetworkPolicy (networking.k8s.io/v1) semantics, enough to ask "may A open a TCP
 * connection to B on port P?" of rendered manifests: a pod is isolated in a direction once any policy of that type
 * selects it, and then a connection needs a matching rule on both ends (egress of the source, ingress of the
 * destination). Peers: podSelector (the policy's namespace), namespaceSelector, both, or ipBlock (IPv4 here).
 */
export type Labels = Record<string, string>;

interface LabelSelector {
  matchLabels?: Labels;
  matchExpressions?: Array<{ key: string; operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist'; values?: string[] }>;
}
interface Peer {
  podSelector?: LabelSelector;
  namespaceSelector?: LabelSelector;
  ipBlock?: { cidr: string; except?: string[] };
}
interface PortRule {
  protocol?: string;
  port?: number | string;
  endPort?: number;
}
export interface NetworkPolicy {
  kind: 'NetworkPolicy';
  metadata: { name: string; namespace?: string };
  spec: {
    podSelector: LabelSelector;
    policyTypes?: Array<'Ingress' | 'Egress'>;
    ingress?: Array<{ from?: Peer[]; ports?: PortRule[] }>;
    egress?: Array<{ to?: Peer[]; ports?: PortRule[] }>;
  };
}

/** One end of a connection: a pod (namespace, labels, named ports) or an address outside the cluster. */
export interface Endpoint {
  ip: string;
  pod?: { namespace: string; labels: Labels; namespaceLabels?: Labels; ports?: Record<string, number> };
}

export function selects(selector: LabelSelector | undefined, labels: Labels): boolean {
  if (!selector) return true;
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) if (labels[k] !== v) return false;
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const ok =
      e.operator === 'In'
        ? has && (e.values ?? []).includes(labels[e.key])
        : e.operator === 'NotIn'
          ? !has || !(e.values ?? []).includes(labels[e.key])
          : e.operator === 'Exists'
            ? has
            : !has;
    if (!ok) return false;
  }
  return true;
}

function ipv4(ip: string): number | null {
  const parts = ip.split('.').map(Number);
  if (parts.length !== 4 || parts.some((p) => !Number.isInteger(p) || p < 0 || p > 255)) return null;
  return parts.reduce((a, p) => a * 256 + p, 0);
}
export function inCidr(ip: string, cidr: string): boolean {
  const [base, bits] = cidr.split('/');
  const a = ipv4(ip);
  const b = ipv4(base);
  if (a === null || b === null) return false; // IPv6 blocks never match an IPv4 address, and the other way round
  const size = 2 ** (32 - Number(bits));
  return Math.floor(a / size) === Math.floor(b / size);
}

function peerMatches(peer: Peer, policyNamespace: string, other: Endpoint): boolean {
  if (peer.ipBlock) return inCidr(other.ip, peer.ipBlock.cidr) && !(peer.ipBlock.except ?? []).some((c) => inCidr(other.ip, c));
  const pod = other.pod;
  if (!pod) return false; // selectors match pods only
  if (peer.namespaceSelector) {
    const nsLabels = { 'kubernetes.io/metadata.name': pod.namespace, ...(pod.namespaceLabels ?? {}) };
    if (!selects(peer.namespaceSelector, nsLabels)) return false;
  } else if (pod.namespace !== policyNamespace) return false;
  return selects(peer.podSelector, pod.labels);
}

function portMatches(rules: PortRule[] | undefined, port: number, protocol: string, target: Endpoint): boolean {
  if (!rules || rules.length === 0) return true;
  return rules.some((r) => {
    if ((r.protocol ?? 'TCP') !== protocol) return false;
    if (r.port === undefined) return true;
    const number = typeof r.port === 'string' ? target.pod?.ports?.[r.port] : r.port;
    if (number === undefined) return false;
    return r.endPort !== undefined ? port >= number && port <= r.endPort : port === number;
  });
}

const types = (p: NetworkPolicy): string[] => p.spec.policyTypes ?? (p.spec.egress ? ['Ingress', 'Egress'] : ['Ingress']);

/** Whether the policies let `from` connect to `to` on port/protocol (both ends in `namespace` when they are pods). */
export function allows(policies: NetworkPolicy[], from: Endpoint, to: Endpoint, port: number, protocol = 'TCP'): boolean {
  const inNs = (p: NetworkPolicy, e: Endpoint) => e.pod !== undefined && e.pod.namespace === (p.metadata.namespace ?? e.pod.namespace);
  const nsOf = (p: NetworkPolicy, e: Endpoint) => p.metadata.namespace ?? e.pod!.namespace;

  const egress = policies.filter((p) => inNs(p, from) && types(p).includes('Egress') && selects(p.spec.podSelector, from.pod!.labels));
  const egressOk =
    egress.length === 0 ||
    egress.some((p) =>
      (p.spec.egress ?? []).some(
        (r) =>
          (r.to === undefined || r.to.length === 0 || r.to.some((peer) => peerMatches(peer, nsOf(p, from), to))) &&
          portMatches(r.ports, port, protocol, to),
      ),
    );
  if (!egressOk) return false;

  const ingress = policies.filter((p) => inNs(p, to) && types(p).includes('Ingress') && selects(p.spec.podSelector, to.pod!.labels));
  return (
    ingress.length === 0 ||
    ingress.some((p) =>
      (p.spec.ingress ?? []).some(
        (r) =>
          (r.from === undefined || r.from.length === 0 || r.from.some((peer) => peerMatches(peer, nsOf(p, to), from))) &&
          portMatches(r.ports, port, protocol, to),
      ),
    )
  );
}
