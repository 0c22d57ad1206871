#!/usr/bin/env node
/* eslint-disable @typescript-eslint/no-require-imports, no-restricted-properties -- a CommonJS launcher: it hands the environment to the CLI */
// The repository's `svc` (`npm run svc -- ...`, and the CLI suites): the TypeScript source through tsx, no build step,
// with @svc/sdk as its source too (the root tsconfig's `paths`). Not shipped: the package's command is dist/svc.cjs.
const { join } = require('node:path');

const tsconfig = join(__dirname, '../../../tsconfig.json');
const inherited = process.env.TSX_TSCONFIG_PATH;
process.env.TSX_TSCONFIG_PATH = tsconfig;
require('tsx/cjs');
// Read once by the line above: the commands the CLI may start do not inherit it.
if (inherited === undefined) delete process.env.TSX_TSCONFIG_PATH;
else process.env.TSX_TSCONFIG_PATH = inherited;
require(join(__dirname, '../src/main.ts'))
  .run(process.argv, process.env)
  .then((code) => {
    process.exitCode = code;
  });
