/** One jest run for the whole monorepo; TypeScript through SWC (type-checking is `npm run typecheck`). */
/**
 * The HTTP suite run a second time with the bus on the real Kafka broker: webhooks, whose deliveries cross the bus
 * end to end (decision 79, narrowed in 86 to fit CI's 15 minutes). The bus contract, the Kafka fault suites and the
 * Kafka e2e suites run on the broker as well.
 */
const KAFKA_SUITES = ['webhooks'];

/**
 * The packages whose manifests are the published ones (entry points in dist/, built by `prepack`): tests use their
 * source, as tsc and tsx do through the root tsconfig's `paths` (decision 91).
 */
// eslint-disable-next-line @typescript-eslint/no-require-imports -- jest reads this file as CommonJS
const { compilerOptions } = require('./tsconfig.json');
const SOURCE_OF = Object.fromEntries(
  Object.entries(compilerOptions.paths).map(([name, [file]]) => [`^${name}$`, `<rootDir>/${file.replace(/^\.\//, '')}`]),
);

const project = {
  testEnvironment: 'node',
  transform: { '^.+\\.(t|j)sx?$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
  testPathIgnorePatterns: ['/node_modules/'],
  moduleNameMapper: SOURCE_OF,
  setupFiles: ['<rootDir>/test/setup/store-check.ts'],
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
      setupFiles: [...project.setupFiles, '<rootDir>/test/setup/bus-kafka.ts'],
    },
  ],
  testTimeout: 30000,
  // Installs redis-server, chromium, a JRE and Maven when missing (or stops naming them), so `npm test` alone runs on
  // a fresh machine; starts a real Kafka broker; compiles dist/ as `npm start` does (the process-level suites run it).
  globalSetup: '<rootDir>/test/setup/global.ts',
  globalTeardown: '<rootDir>/test/setup/global-teardown.ts',
  // Integration suites start real servers: two workers suit the 2-core CI machine (three were no faster from a fresh
  // clone, and load-sensitive suites then timed out: decision 86).
  maxWorkers: 2,
};
