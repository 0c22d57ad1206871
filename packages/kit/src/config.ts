/**
 * One validated config object per process, read from the environment once at start.
 * A process that is misconfigured stops at once with every problem listed.
 */
import { readFileSync } from 'node:fs';

type Kind = 'string' | 'int' | 'bool' | 'list' | 'url';
interface FieldSpec<K extends Kind = Kind> {
  env: string;
  kind: K;
  default?: string;
  required?: boolean;
  /** Allowed values for strings. */
  oneOf?: readonly string[];
  /** What a string must match entirely. */
  pattern?: RegExp;
  min?: number;
  max?: number;
  /** Never echo the value in error messages. */
  secret?: boolean;
  /**
   * When set: a problem with this value beside the others (a bad combination, an unreadable file), checked once every
   * field has a valid value.
   */
  check?: (value: any, config: Record<string, unknown>) => string | undefined;
}
type ValueOf<K extends Kind> = K extends 'int' ? number : K extends 'bool' ? boolean : K extends 'list' ? string[] : string;
export type ConfigSpec = Record<string, FieldSpec>;
export type ConfigOf<S extends ConfigSpec> = {
  readonly [P in keyof S]: S[P] extends { required: true } | { default: string }
    ? ValueOf<S[P]['kind']>
    : ValueOf<S[P]['kind']> | undefined;
};

export class ConfigError extends Error {
  constructor(readonly problems: string[]) {
    super(`Invalid configuration:\n  - ${problems.join('\n  - ')}`);
    this.name = 'ConfigError';
  }
}

/** Declares one setting; `default` or `required: true` makes its value non-optional in the config type. */
export function field<K extends Kind, O extends Omit<FieldSpec<K>, 'env' | 'kind'> = Record<never, never>>(
  env: string,
  kind: K,
  options?: O,
): { env: string; kind: K } & O {
  return { env, kind, ...(options as O) };
}

export function loadConfig<S extends ConfigSpec>(spec: S, env: NodeJS.ProcessEnv = process.env): ConfigOf<S> {
  const problems: string[] = [];
  const out: Record<string, unknown> = {};
  for (const [key, f] of Object.entries(spec)) {
    const raw = env[f.env] !== undefined && env[f.env] !== '' ? env[f.env] : f.default;
    if (raw === undefined) {
      if (f.required) problems.push(`${f.env} is required`);
      continue;
    }
    const shown = f.secret ? '(hidden)' : JSON.stringify(raw);
    switch (f.kind) {
      case 'int': {
        const n = Number(raw);
        if (!Number.isInteger(n)) problems.push(`${f.env} must be an integer, got ${shown}`);
        else if ((f.min !== undefined && n < f.min) || (f.max !== undefined && n > f.max))
          problems.push(`${f.env} must be between ${f.min ?? '-inf'} and ${f.max ?? 'inf'}, got ${shown}`);
        else out[key] = n;
        break;
      }
      case 'bool':
        if (!['true', 'false', '1', '0'].includes(raw)) problems.push(`${f.env} must be true or false, got ${shown}`);
        else out[key] = raw === 'true' || raw === '1';
        break;
      case 'list':
        out[key] = raw
          .split(',')
          .map((s) => s.trim())
          .filter(Boolean);
        break;
      case 'url':
        try {
          new URL(raw);
          out[key] = raw.replace(/\/$/, '');
        } catch {
          problems.push(`${f.env} must be a URL, got ${shown}`);
        }
        break;
      default:
        if (f.oneOf && !f.oneOf.includes(raw)) problems.push(`${f.env} must be one of ${f.oneOf.join(', ')}, got ${shown}`);
        else if (f.pattern && !f.pattern.test(raw)) problems.push(`${f.env} must match ${f.pattern.source}, got ${shown}`);
        else out[key] = raw;
    }
  }
  // Combinations are judged once every value is valid (an invalid one would read as unset).
  if (problems.length === 0)
    for (const [key, f] of Object.entries(spec)) {
      const problem = f.check && out[key] !== undefined ? f.check(out[key], out) : undefined;
      if (problem) problems.push(problem);
    }
  if (problems.length) throw new ConfigError(problems);
  return out as ConfigOf<S>;
}

export const KAFKA_SASL_MECHANISMS = ['plain', 'scram-sha-256', 'scram-sha-512'] as const;
export type KafkaSaslMechanism = (typeof KAFKA_SASL_MECHANISMS)[number];

/**
 * Kafka's TLS and SASL settings (MSK, Confluent Cloud, Aiven, Strimzi: docs/runbooks/security.md). Validated together:
 * a mechanism needs a username and a password and those need a mechanism; a CA file needs KAFKA_SSL; PLAIN (the
 * password itself on the wire) needs TLS in production.
 */
function kafkaSecurityConfig() {
  const needsMechanism = (name: string) => (_: string, c: Record<string, unknown>) =>
    c.kafkaSaslMechanism ? undefined : `${name} is set but KAFKA_SASL_MECHANISM is not (one of ${KAFKA_SASL_MECHANISMS.join(', ')})`;
  return {
    kafkaSsl: field('KAFKA_SSL', 'bool', { default: 'false' }),
    kafkaSslCaFile: field('KAFKA_SSL_CA_FILE', 'string', {
      check: (path: string, c: Record<string, unknown>) =>
        c.kafkaSsl ? pemProblem('KAFKA_SSL_CA_FILE', path) : 'KAFKA_SSL_CA_FILE is set but KAFKA_SSL is not true',
    }),
    kafkaSaslMechanism: field('KAFKA_SASL_MECHANISM', 'string', {
      oneOf: KAFKA_SASL_MECHANISMS,
      check: (mechanism: string, c: Record<string, unknown>) => {
        if (!c.kafkaSaslUsername || !c.kafkaSaslPassword) return 'KAFKA_SASL_MECHANISM needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD';
        if (mechanism === 'plain' && !c.kafkaSsl && c.nodeEnv === 'production')
          return 'KAFKA_SASL_MECHANISM=plain sends the password as it is: set KAFKA_SSL=true in production';
        return undefined;
      },
    }),
    kafkaSaslUsername: field('KAFKA_SASL_USERNAME', 'string', { check: needsMechanism('KAFKA_SASL_USERNAME') }),
    kafkaSaslPassword: field('KAFKA_SASL_PASSWORD', 'string', { secret: true, check: needsMechanism('KAFKA_SASL_PASSWORD') }),
  };
}

/** Why a CA file cannot be used (unreadable, or no PEM certificate in it), or undefined. */
function pemProblem(setting: string, path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8').includes('-----BEGIN CERTIFICATE-----') ? undefined : `${setting} (${path}) holds no PEM certificate`;
  } catch (err) {
    return `${setting} cannot be read: ${(err as Error).message}`;
  }
}

/** Settings every service process shares. */
export const commonConfig = {
  /** Prometheus `GET /metrics` on its own listener; unset: none (the gateway also serves it to the operator). */
  metricsPort: field('METRICS_PORT', 'int', { min: 0, max: 65535 }),
  metricsHost: field('METRICS_HOST', 'string', { default: '127.0.0.1' }),
  nodeEnv: field('NODE_ENV', 'string', { default: 'development' }),
  logLevel: field('LOG_LEVEL', 'string', {
    default: 'info',
    oneOf: ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'],
  }),
  dataDir: field('DATA_DIR', 'string', { default: './.data' }),
  mongodbUri: field('MONGODB_URI', 'string', { secret: true }),
  /** MongoDB: the bound of every wait (an operation, a transaction's retries, a primary to appear, close). */
  mongodbOpTimeoutMs: field('MONGODB_OP_TIMEOUT_MS', 'int', { default: '5000', min: 100, max: 600_000 }),
  kafkaBrokers: field('KAFKA_BROKERS', 'list'),
  ...kafkaSecurityConfig(),
  /**
   * The topics' partitions, replicas and min.insync.replicas, and whether a service may create a missing topic.
   * Unset, replication and creation follow NODE_ENV (kafkaTopicSettings).
   */
  kafkaPartitions: field('KAFKA_PARTITIONS', 'int', { default: '6', min: 1, max: 1000 }),
  kafkaReplicationFactor: field('KAFKA_REPLICATION_FACTOR', 'int', { min: 1, max: 10 }),
  kafkaMinInsyncReplicas: field('KAFKA_MIN_INSYNC_REPLICAS', 'int', { min: 1, max: 10 }),
  kafkaCreateTopics: field('KAFKA_CREATE_TOPICS', 'bool'),
  /** Prefix of topic and consumer-group names, for several deployments on one cluster. */
  kafkaNamespace: field('KAFKA_NAMESPACE', 'string', { pattern: /^[A-Za-z0-9_-]{1,64}$/ }),
  /**
   * Consumer-group session: a consumer that died without leaving (SIGKILL, a lost node) holds its partitions this
   * long. Within the broker's group.min/max.session.timeout.ms (6 s and 30 min by default).
   */
  kafkaSessionTimeoutMs: field('KAFKA_SESSION_TIMEOUT_MS', 'int', { default: '30000', min: 6000, max: 1_800_000 }),
  /**
   * Handler calls a poison message (the handler says it cannot be decoded or validated) gets before it is set aside
   * as a dead letter (both buses). Other handler errors are an unavailable dependency: retried without limit.
   */
  busMaxAttempts: field('BUS_MAX_ATTEMPTS', 'int', { default: '5', min: 1, max: 1000 }),
  /** Cap of a failing handler's retry backoff (100 ms doubling), both buses. */
  busRetryMaxMs: field('BUS_RETRY_MAX_MS', 'int', { default: '5000', min: 100, max: 300_000 }),
  /** `redis://[user:password@]host:port[/db]`, or `rediss://` for TLS (ACL users and TLS as the URL says). */
  redisUrl: field('REDIS_URL', 'string', {
    secret: true,
    check: (url: string) =>
      /^rediss?:\/\/[^/]/.test(url) ? undefined : 'REDIS_URL must be redis://[user:password@]host:port or rediss://... (TLS)',
  }),
  /** PEM file of the CA that signed Redis's certificate, when the system's trust store does not hold it. */
  redisTlsCaFile: field('REDIS_TLS_CA_FILE', 'string', {
    check: (path: string, c: Record<string, unknown>) =>
      String(c.redisUrl ?? '').startsWith('rediss://')
        ? pemProblem('REDIS_TLS_CA_FILE', path)
        : 'REDIS_TLS_CA_FILE is set but REDIS_URL is not a rediss:// (TLS) URL',
  }),
  host: field('SERVICE_HOST', 'string', { default: '127.0.0.1' }),
  /** Base64 of 32 bytes for AES-256-GCM of secrets at rest; generated and kept under DATA_DIR when unset. */
  masterKey: field('SVC_MASTER_KEY', 'string', { secret: true }),
  jwtIssuer: field('JWT_ISSUER', 'string', { default: 'svc-identity' }),
  jwtAudience: field('JWT_AUDIENCE', 'string', { default: 'svc-api' }),
  identityAddr: field('IDENTITY_ADDR', 'string', { default: '127.0.0.1:50051' }),
  grpcDeadlineMs: field('GRPC_DEADLINE_MS', 'int', { default: '5000', min: 100 }),
  /** Unset: allowed unless NODE_ENV=production (see egressPolicyFrom). */
  egressAllowPrivate: field('EGRESS_ALLOW_PRIVATE', 'bool'),
} as const;

/** How a Kafka client reaches the brokers: TLS (with the CA's PEM when given) and SASL credentials, when configured. */
export interface KafkaSecurity {
  ssl?: { ca?: string };
  sasl?: { mechanism: KafkaSaslMechanism; username: string; password: string };
}

/** The Kafka security settings of a loaded config, the CA file read (every Kafka client is created with them). */
export function kafkaSecurity(config: {
  kafkaSsl?: boolean;
  kafkaSslCaFile?: string;
  kafkaSaslMechanism?: string;
  kafkaSaslUsername?: string;
  kafkaSaslPassword?: string;
}): KafkaSecurity {
  const security: KafkaSecurity = {};
  if (config.kafkaSsl) security.ssl = config.kafkaSslCaFile ? { ca: readFileSync(config.kafkaSslCaFile, 'utf8') } : {};
  if (config.kafkaSaslMechanism)
    security.sasl = {
      mechanism: config.kafkaSaslMechanism as KafkaSaslMechanism,
      username: config.kafkaSaslUsername ?? '',
      password: config.kafkaSaslPassword ?? '',
    };
  return security;
}

/** ioredis's TLS option beyond what REDIS_URL says: the CA of REDIS_TLS_CA_FILE (a rediss:// URL alone uses the system's). */
export function redisTls(config: { redisTlsCaFile?: string }): { tls?: { ca: string } } {
  return config.redisTlsCaFile ? { tls: { ca: readFileSync(config.redisTlsCaFile, 'utf8') } } : {};
}

/** A service's MongoDB URI: `<NAME>_MONGODB_URI` wins over the shared `MONGODB_URI`. */
export function mongoUriFor(service: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
  return env[`${service.toUpperCase()}_MONGODB_URI`] || env.MONGODB_URI || undefined;
}

export interface KafkaTopicSettings {
  numPartitions: number;
  replicationFactor: number;
  minInsyncReplicas: number;
  /** Whether a service creates a topic it finds missing; when not, it names the topic and stops. */
  createTopics: boolean;
}

/**
 * The Kafka topic settings, with the defaults of NODE_ENV: in production 3 replicas, min.insync.replicas 2 (with
 * acks=-1 a write is then on two disks before the outbox deletes it) and no implicit creation (topics are deployed:
 * deploy/helm/svc's kafka-topics Job); elsewhere 1, 1 and created on first use (one local broker).
 */
export function kafkaTopicSettings(config: {
  nodeEnv: string;
  kafkaPartitions: number;
  kafkaReplicationFactor?: number;
  kafkaMinInsyncReplicas?: number;
  kafkaCreateTopics?: boolean;
}): KafkaTopicSettings {
  const production = config.nodeEnv === 'production';
  const replicationFactor = config.kafkaReplicationFactor ?? (production ? 3 : 1);
  const minInsyncReplicas = config.kafkaMinInsyncReplicas ?? Math.min(production ? 2 : 1, replicationFactor);
  if (minInsyncReplicas > replicationFactor)
    throw new ConfigError([
      `KAFKA_MIN_INSYNC_REPLICAS (${minInsyncReplicas}) must not exceed KAFKA_REPLICATION_FACTOR (${replicationFactor}): no write could be acknowledged`,
    ]);
  return {
    numPartitions: config.kafkaPartitions,
    replicationFactor,
    minInsyncReplicas,
    createTopics: config.kafkaCreateTopics ?? !production,
  };
}

/**
 * The model calls' circuit breaker (CONTRACT.md 9), the same in every process that calls models (chat, agents, the
 * gateway's /v1): a deployment that failed LLM_BREAKER_FAILURES times within 60 s is skipped for
 * LLM_BREAKER_COOLDOWN_S, then tried once again.
 */
export const llmBreakerConfig = {
  llmBreakerFailures: field('LLM_BREAKER_FAILURES', 'int', { default: '5', min: 1, max: 10_000 }),
  llmBreakerCooldownS: field('LLM_BREAKER_COOLDOWN_S', 'int', { default: '30', min: 1, max: 3600 }),
} as const;
