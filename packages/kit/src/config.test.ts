import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { commonConfig, ConfigError, field, kafkaSecurity, kafkaTopicSettings, loadConfig, redisTls } from './config';

const spec = {
  port: field('PORT', 'int', { default: '8080', min: 0, max: 65535 }),
  brokers: field('KAFKA_BROKERS', 'list'),
  debug: field('DEBUG', 'bool', { default: 'false' }),
  level: field('LEVEL', 'string', { default: 'info', oneOf: ['info', 'debug'] }),
  url: field('PUBLIC_URL', 'url'),
  token: field('TOKEN', 'string', { required: true, secret: true }),
};

describe('loadConfig', () => {
  it('applies defaults and parses every kind', () => {
    const c = loadConfig(spec, { TOKEN: 't', KAFKA_BROKERS: 'a:1, b:2,', DEBUG: '1', PUBLIC_URL: 'https://x.example/' });
    expect(c).toEqual({ port: 8080, brokers: ['a:1', 'b:2'], debug: true, level: 'info', url: 'https://x.example', token: 't' });
  });

  it('lists every problem at once and never echoes a secret', () => {
    let err: unknown;
    try {
      loadConfig(spec, { PORT: '70000', DEBUG: 'yes', LEVEL: 'loud', PUBLIC_URL: 'not a url' });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ConfigError);
    const problems = (err as ConfigError).problems;
    expect(problems).toHaveLength(5);
    expect(problems.join('\n')).toMatch(/PORT must be between 0 and 65535/);
    expect(problems.join('\n')).toMatch(/TOKEN is required/);
    expect(() => loadConfig(spec, { TOKEN: 's3cret', PORT: 'x' })).toThrow(/PORT must be an integer/);
    const secretSpec = { key: field('KEY', 'int', { secret: true }) };
    expect(() => loadConfig(secretSpec, { KEY: 'hunter2' })).toThrow(/\(hidden\)/);
  });
});

describe('kafkaTopicSettings', () => {
  const base = { kafkaPartitions: 6 };
  it('defaults by NODE_ENV: production replicates (3, min.insync 2) and never creates topics; development 1, 1 and creates', () => {
    expect(kafkaTopicSettings({ ...base, nodeEnv: 'production' })).toEqual({
      numPartitions: 6,
      replicationFactor: 3,
      minInsyncReplicas: 2,
      createTopics: false,
    });
    expect(kafkaTopicSettings({ ...base, nodeEnv: 'development' })).toEqual({
      numPartitions: 6,
      replicationFactor: 1,
      minInsyncReplicas: 1,
      createTopics: true,
    });
  });

  it('takes the settings as given, from the environment', () => {
    const config = loadConfig(commonConfig, {
      NODE_ENV: 'production',
      KAFKA_REPLICATION_FACTOR: '5',
      KAFKA_MIN_INSYNC_REPLICAS: '3',
      KAFKA_CREATE_TOPICS: 'true',
    });
    expect(kafkaTopicSettings(config)).toEqual({ numPartitions: 6, replicationFactor: 5, minInsyncReplicas: 3, createTopics: true });
    // One broker in production (compose): min.insync follows the replication factor down.
    expect(kafkaTopicSettings({ ...base, nodeEnv: 'production', kafkaReplicationFactor: 1 }).minInsyncReplicas).toBe(1);
  });

  it('refuses a min.insync.replicas above the replication factor (no write could be acknowledged)', () => {
    expect(() => kafkaTopicSettings({ ...base, nodeEnv: 'production', kafkaReplicationFactor: 2, kafkaMinInsyncReplicas: 3 })).toThrow(
      ConfigError,
    );
    expect(() => loadConfig(commonConfig, { KAFKA_MIN_INSYNC_REPLICAS: '0' })).toThrow(/KAFKA_MIN_INSYNC_REPLICAS/);
    expect(() => loadConfig(commonConfig, { KAFKA_CREATE_TOPICS: 'maybe' })).toThrow(/KAFKA_CREATE_TOPICS/);
  });
});

describe('Kafka and Redis security settings', () => {
  let dir: string;
  let ca: string;
  const PEM = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';
  beforeAll(() => {
    dir = mkdtempSync(join(tmpdir(), 'svc-config-'));
    ca = join(dir, 'ca.pem');
    writeFileSync(ca, PEM);
    writeFileSync(join(dir, 'not-pem.txt'), 'hello');
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  const problemsOf = (env: Record<string, string>) => {
    try {
      loadConfig(commonConfig, env);
      return [];
    } catch (err) {
      return (err as ConfigError).problems;
    }
  };

  it('reads TLS with its CA and SASL into what every Kafka client is created with', () => {
    const config = loadConfig(commonConfig, {
      KAFKA_SSL: 'true',
      KAFKA_SSL_CA_FILE: ca,
      KAFKA_SASL_MECHANISM: 'scram-sha-512',
      KAFKA_SASL_USERNAME: 'svc',
      KAFKA_SASL_PASSWORD: 'pw',
    });
    expect(kafkaSecurity(config)).toEqual({ ssl: { ca: PEM }, sasl: { mechanism: 'scram-sha-512', username: 'svc', password: 'pw' } });
    // TLS with the system's trust store (a publicly signed broker certificate), no SASL; and neither by default.
    expect(kafkaSecurity(loadConfig(commonConfig, { KAFKA_SSL: 'true' }))).toEqual({ ssl: {} });
    expect(kafkaSecurity(loadConfig(commonConfig, {}))).toEqual({});
  });

  it('refuses a bad combination at start, naming the settings and never the password', () => {
    expect(problemsOf({ KAFKA_SASL_MECHANISM: 'scram-sha-256', KAFKA_SASL_PASSWORD: 'hunter2' })).toEqual([
      'KAFKA_SASL_MECHANISM needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD',
    ]);
    expect(problemsOf({ KAFKA_SASL_USERNAME: 'svc', KAFKA_SASL_PASSWORD: 'hunter2' })).toEqual([
      'KAFKA_SASL_USERNAME is set but KAFKA_SASL_MECHANISM is not (one of plain, scram-sha-256, scram-sha-512)',
      'KAFKA_SASL_PASSWORD is set but KAFKA_SASL_MECHANISM is not (one of plain, scram-sha-256, scram-sha-512)',
    ]);
    expect(problemsOf({ KAFKA_SASL_MECHANISM: 'gssapi', KAFKA_SASL_USERNAME: 'svc', KAFKA_SASL_PASSWORD: 'hunter2' })).toEqual([
      'KAFKA_SASL_MECHANISM must be one of plain, scram-sha-256, scram-sha-512, got "gssapi"',
    ]);
    expect(problemsOf({ KAFKA_SSL_CA_FILE: ca })).toEqual(['KAFKA_SSL_CA_FILE is set but KAFKA_SSL is not true']);
    expect(problemsOf({ KAFKA_SSL: 'true', KAFKA_SSL_CA_FILE: join(dir, 'missing.pem') })).toEqual([
      expect.stringMatching(/^KAFKA_SSL_CA_FILE cannot be read: ENOENT/),
    ]);
    expect(problemsOf({ KAFKA_SSL: 'true', KAFKA_SSL_CA_FILE: join(dir, 'not-pem.txt') })).toEqual([
      `KAFKA_SSL_CA_FILE (${join(dir, 'not-pem.txt')}) holds no PEM certificate`,
    ]);
    // PLAIN sends the password itself: over TLS only, in production.
    const plain = { KAFKA_SASL_MECHANISM: 'plain', KAFKA_SASL_USERNAME: 'svc', KAFKA_SASL_PASSWORD: 'hunter2' };
    expect(problemsOf({ ...plain, NODE_ENV: 'production' })).toEqual([
      'KAFKA_SASL_MECHANISM=plain sends the password as it is: set KAFKA_SSL=true in production',
    ]);
    expect(problemsOf({ ...plain, NODE_ENV: 'production', KAFKA_SSL: 'true' })).toEqual([]);
    expect(problemsOf(plain)).toEqual([]);
    const all = [
      problemsOf({ KAFKA_SASL_MECHANISM: 'scram-sha-256', KAFKA_SASL_PASSWORD: 'hunter2' }),
      problemsOf({ KAFKA_SASL_USERNAME: 'svc', KAFKA_SASL_PASSWORD: 'hunter2' }),
    ].flat();
    expect(all.join('\n')).not.toContain('hunter2');
  });

  it('takes rediss:// and ACL users in REDIS_URL, with a CA file for TLS only', () => {
    const config = loadConfig(commonConfig, { REDIS_URL: 'rediss://svc:pw@redis.example:6380/0', REDIS_TLS_CA_FILE: ca });
    expect(redisTls(config)).toEqual({ tls: { ca: PEM } });
    expect(redisTls(loadConfig(commonConfig, { REDIS_URL: 'redis://svc:pw@127.0.0.1:6379' }))).toEqual({});
    expect(problemsOf({ REDIS_URL: 'redis://127.0.0.1:6379', REDIS_TLS_CA_FILE: ca })).toEqual([
      'REDIS_TLS_CA_FILE is set but REDIS_URL is not a rediss:// (TLS) URL',
    ]);
    expect(problemsOf({ REDIS_URL: 'http://svc:hunter2@redis:6379' })).toEqual([
      'REDIS_URL must be redis://[user:password@]host:port or rediss://... (TLS)',
    ]);
  });
});
