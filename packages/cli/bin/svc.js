#!/usr/bin/env node
/* eslint-disable @typescript-eslint/no-require-imports, no-restricted-properties -- a CommonJS launcher: it hands the environment to the CLI */
// Installed from its package: the compiled CLI (dist/, plain JavaScript). In the repository, where the TypeScript
// source sits beside this file (the package ships no src/): the source through tsx, no build step.
const { existsSync } = require('node:fs');
const { join } = require('node:path');

const source = join(__dirname, '../src/main.ts');
let cli;
if (existsSync(source)) {
  require('tsx/cjs');
  cli = require(source);
} else {
  cli = require('../dist/index.cjs');
}
cli.run(process.argv, process.env).then((code) => {
  process.exitCode = code;
});
