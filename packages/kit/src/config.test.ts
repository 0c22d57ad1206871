import { commonConfig, ConfigError, field, kafkaTopicSettings, loadConfig } from './config';

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
