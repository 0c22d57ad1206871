import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['**/node_modules/**', 'packages/proto/src/**', '.data/**', 'coverage/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_' }],
      // process.env is read in config modules only (one validated object per process).
      'no-restricted-properties': ['warn', { object: 'process', property: 'env', message: 'Read settings through the config module.' }],
    },
  },
);
