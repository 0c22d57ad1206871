/** One jest run for the whole monorepo; TypeScript through SWC (type-checking is `npm run typecheck`). */
module.exports = {
  testEnvironment: 'node',
  transform: { '^.+\\.(t|j)sx?$': ['@swc/jest', { jsc: { target: 'es2022' } }] },
  testMatch: ['<rootDir>/{packages,services,gateway,test}/**/*.test.ts'],
  testPathIgnorePatterns: ['/node_modules/'],
  testTimeout: 30000,
  // Integration suites start real servers: two workers suit the 2-core CI machine.
  maxWorkers: 2,
};
