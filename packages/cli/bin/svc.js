#!/usr/bin/env node
/* eslint-disable @typescript-eslint/no-require-imports -- a CommonJS launcher for the TypeScript entry point */
// Scaffold: the CLI's entry point (filled in by the CLI work).
require('tsx/cjs');
require('../src/main.ts');
