/** One jest run for the whole monorepo; TypeScript through SWC (type-checking is `npm run typecheck`). */
/**
 * HTTP suites run a second time with the bus on the real Kafka broker: one per way an outcome travels over the bus
 * (decision 79, narrowed in 86): a webhook delivery, the event log, an agent run and its billing, billing's grant on
 * tenant.created, and the audit entry billing's outbox sends to identity.
 */
const KAFKA_SUITES = ['agent-runs', 'audit-log', 'billing', 'events-api', 'webhooks'];

const project = {
  testEnvironment: 'node',
  transform: { '^.+\\.(t|j)sx?$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
  testPathIgnorePatterns: ['/node_modules/'],
};

module.exports = {
  projects: [
    { ...project, displayName: 'all', testMatch: ['<rootDir>/{packages,services,gateway,test}/**/*.test.ts'] },
    // The HTTP suites whose behaviour crosses the event bus again, with the bus on the real Kafka broker (embedded
    // stores): what `npm start` with KAFKA_BROKERS serves must pass what the default serves. Suites that never leave
    // one request's gRPC calls run once (decision 79: the whole set twice no longer fits CI's 15 minutes).
    {
      ...project,
      displayName: 'http-on-kafka',
      testMatch: KAFKA_SUITES.map((name) => `<rootDir>/test/http/${name}.test.ts`),
      setupFiles: ['<rootDir>/test/setup/bus-kafka.ts'],
    },
  ],
  testTimeout: 30000,
  // Installs redis-server, chromium, a JRE and Maven when missing (or stops naming them), so `npm test` alone runs on
  // a fresh machine; starts a real Kafka broker; compiles dist/ as `npm start` does (the process-level suites run it).
  globalSetup: '<rootDir>/test/setup/global.ts',
  globalTeardown: '<rootDir>/test/setup/global-teardown.ts',
  // Three workers on the 2-core CI machine: most suites spend their time waiting (on a broker's timeouts, a crash
  // being recovered, a key refresh), so a third overlaps them: the whole run took 628 s instead of 807 s (decision 86).
  maxWorkers: 3,
};
