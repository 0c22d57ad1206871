import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/node_modules/**', 'packages/proto/src/**', '.data/**', 'coverage/**', '**/dist/**', 'gateway/public/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      // Settings are read once per process by the config module, passed down from the entry point.
      'no-restricted-properties': ['error', { object: 'process', property: 'env', message: 'Read settings through the config module.' }],
    },
  },
  {
    // Entry points and config modules read the environment; tests, scripts and benchmarks set it up.
    files: [
      '**/config.ts',
      '**/server.ts',
      '**/main.ts',
      '**/telemetry.ts',
      'scripts/**',
      'bench/**',
      'test/**',
      '**/*.test.ts',
      '**/logger.ts',
    ],
    rules: { 'no-restricted-properties': 'off' },
  },
  {
    // The SDK runs in browsers too (its browser entry is bundled for platform=browser): no Node built-in.
    files: ['packages/sdk/src/**/*.ts'],
    ignores: ['**/*.test.ts'],
    rules: {
      'no-restricted-imports': [
        'error',
        {
          patterns: [
            {
              regex: '^node:|^(fs|path|os|crypto|http|https|net|stream|url|util|buffer|events|child_process)(/|$)',
              message: 'The SDK uses web APIs only (fetch, web streams): it runs in browsers.',
            },
          ],
        },
      ],
    },
  },
);
