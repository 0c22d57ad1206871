/**
 * Why a connection to a backing server (Kafka, Redis) failed, in words an operator acts on, for /readyz and logs.
 * The words are fixed: no host, user name or server message, since readiness answers without a credential.
 */

export type ConnectionProblemKind = 'credentials' | 'permissions' | 'certificate' | 'tls' | 'unreachable' | 'timeout' | 'unknown';

export interface ConnectionProblem {
  kind: ConnectionProblemKind;
  /** e.g. `Kafka: authentication failed (check KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD)`. */
  reason: string;
  /** The settings are wrong (credentials, permissions, TLS): waiting will not mend it, unlike an outage. */
  misconfigured: boolean;
}

export type BackingServer = 'Kafka' | 'Redis';

const WORDS: Record<ConnectionProblemKind, string> = {
  credentials: 'authentication failed',
  permissions: 'not authorized',
  certificate: 'TLS certificate not trusted',
  tls: 'TLS handshake failed',
  unreachable: 'unreachable',
  timeout: 'no answer in time',
  unknown: 'unavailable',
};

const HINTS: Record<BackingServer, Partial<Record<ConnectionProblemKind, string>>> = {
  Kafka: {
    credentials: 'check KAFKA_SASL_MECHANISM, KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD',
    permissions: "check the user's ACLs on the topics and consumer groups",
    certificate: 'check KAFKA_SSL_CA_FILE and the broker addresses in KAFKA_BROKERS',
    tls: 'check KAFKA_SSL against the listener the brokers expose',
    unreachable: 'check KAFKA_BROKERS, and KAFKA_SSL if the listener expects TLS',
  },
  Redis: {
    credentials: 'check the user and password in REDIS_URL',
    permissions: "check the ACL user's commands, keys and channels",
    certificate: 'check REDIS_TLS_CA_FILE and the host in REDIS_URL',
    tls: 'check redis:// or rediss:// in REDIS_URL against the port',
    unreachable: 'check the host and port in REDIS_URL, and rediss:// if the server expects TLS',
  },
};

/** Node's certificate verification codes (tls.TLSSocket's `authorizationError`) and the host name check. */
const CERTIFICATE_CODES =
  /^(ERR_TLS_CERT_ALTNAME_INVALID|(DEPTH_ZERO_)?SELF_SIGNED_CERT(_IN_CHAIN)?|UNABLE_TO_(VERIFY_LEAF_SIGNATURE|GET_ISSUER_CERT(_LOCALLY)?)|CERT_\w+)$/;
const UNREACHABLE_CODES = /^(ECONNREFUSED|ENOTFOUND|EAI_AGAIN|EHOSTUNREACH|ENETUNREACH|ECONNRESET|EPIPE|ETIMEDOUT)$/;

/** The error and what it wraps (kafkajs: `cause`, `originalError`; AggregateError: `errors`). */
function chain(err: unknown, seen = new Set<unknown>()): Array<{ name: string; code: string; type: string; message: string }> {
  if (!err || typeof err !== 'object' || seen.has(err)) return [];
  seen.add(err);
  const e = err as {
    name?: unknown;
    code?: unknown;
    type?: unknown;
    message?: unknown;
    cause?: unknown;
    originalError?: unknown;
    errors?: unknown;
  };
  const here = { name: String(e.name ?? ''), code: String(e.code ?? ''), type: String(e.type ?? ''), message: String(e.message ?? '') };
  const inner = [e.cause, e.originalError, ...(Array.isArray(e.errors) ? e.errors : [])];
  return [here, ...inner.flatMap((i) => chain(i, seen))];
}

function kindOf(err: unknown): ConnectionProblemKind {
  const links = chain(err);
  const any = (test: (l: (typeof links)[number]) => boolean) => links.some(test);
  if (
    any(
      (l) =>
        l.name === 'KafkaJSSASLAuthenticationError' ||
        /^(WRONGPASS|NOAUTH)\b/.test(l.message) ||
        /SASL_AUTHENTICATION_FAILED|ILLEGAL_SASL_STATE|UNSUPPORTED_SASL_MECHANISM/.test(l.type),
    )
  )
    return 'credentials';
  if (any((l) => /^NOPERM\b/.test(l.message) || /_AUTHORIZATION_FAILED$/.test(l.type))) return 'permissions';
  if (any((l) => CERTIFICATE_CODES.test(l.code) || /certificate|altnames/i.test(l.message))) return 'certificate';
  if (
    any(
      (l) =>
        l.code === 'EPROTO' ||
        l.code.startsWith('ERR_SSL') ||
        /before secure TLS connection|wrong version number|SSL routines/i.test(l.message),
    )
  )
    return 'tls';
  if (any((l) => UNREACHABLE_CODES.test(l.code) || /ECONNREFUSED|ENOTFOUND|Connection timeout|Connection closed/.test(l.message)))
    return 'unreachable';
  if (any((l) => /(within|after) \d+ ?ms|timed out|timeout/i.test(l.message))) return 'timeout';
  return 'unknown';
}

export function connectionProblem(server: BackingServer, err: unknown): ConnectionProblem {
  const kind = kindOf(err);
  const hint = HINTS[server][kind];
  return {
    kind,
    reason: `${server}: ${WORDS[kind]}${hint ? ` (${hint})` : ''}`,
    misconfigured: kind === 'credentials' || kind === 'permissions' || kind === 'certificate' || kind === 'tls',
  };
}
