#!/usr/bin/env node
/* eslint-disable @typescript-eslint/no-require-imports, no-restricted-properties -- a CommonJS launcher: it hands the environment to the CLI */
// The TypeScript entry point, run through tsx (no build step): `npx svc ...` works right after npm install.
require('tsx/cjs');
require('../src/main.ts')
  .run(process.argv, process.env)
  .then((code) => {
    process.exitCode = code;
  });
