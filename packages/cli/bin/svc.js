#!/usr/bin/env node
/* eslint-disable @typescript-eslint/no-require-imports, no-restricted-properties -- a CommonJS launcher: it hands the environment to the CLI */
// `svc`: in a checkout (`npx svc`, `npm run svc -- ...`, the CLI suites) the TypeScript source through tsx, no build
// step, with @svc/sdk as its source too (the root tsconfig's `paths`); in the installed package, which ships no
// source, the built dist/svc.cjs.
const { existsSync } = require('node:fs');
const { join } = require('node:path');

if (!existsSync(join(__dirname, '../src/main.ts'))) require('../dist/svc.cjs');
else runSource();

function runSource() {
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
}
