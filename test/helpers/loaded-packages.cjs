/**
 * Preload (`node --require`, through NODE_OPTIONS) for test/deploy/startup-modules.test.ts: on SIGUSR2 a process
 * writes the npm packages it has loaded so far (every module in require's cache under node_modules, by package name)
 * to `$LOADED_PACKAGES_DIR/<pid>.json`, with its entry script, so a test can tell which packages a process paid for.
 */
'use strict';
/* eslint-disable @typescript-eslint/no-require-imports -- a CommonJS preload */
const { renameSync, writeFileSync } = require('node:fs');
const { join } = require('node:path');

const dir = process.env.LOADED_PACKAGES_DIR;
if (dir) {
  process.on('SIGUSR2', () => {
    const packages = new Set();
    for (const file of Object.keys(require.cache)) {
      const at = file.lastIndexOf('/node_modules/');
      if (at < 0) continue;
      const parts = file.slice(at + '/node_modules/'.length).split('/');
      packages.add(parts[0].startsWith('@') ? `${parts[0]}/${parts[1]}` : parts[0]);
    }
    // Written aside and renamed, so a reader never sees half a file.
    const path = join(dir, `${process.pid}.json`);
    writeFileSync(`${path}.tmp`, JSON.stringify({ entry: process.argv[1] ?? '', packages: [...packages].sort() }));
    renameSync(`${path}.tmp`, path);
  });
}
