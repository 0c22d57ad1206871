/**
 * Each workspace's package.json lists exactly the packages its code imports (issue 23): nothing used through another
 * workspace's declaration (hoisting hides it until the package is installed alone), nothing declared and unused.
 * Imports are read from the source as text: `from '...'`, `import('...')`, `require('...')`; tests are not code.
 * And each workspace says what it offers with an `exports` map: nobody reaches into another's `src/` (decision 80).
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { isBuiltin } from 'node:module';
import { join, resolve } from 'node:path';

const ROOT = resolve(__dirname, '../..');
const WORKSPACES = ['gateway', ...['packages', 'services'].flatMap((d) => readdirSync(join(ROOT, d)).map((n) => `${d}/${n}`))];

/** Where each workspace's code lives (the console's browser code belongs to the gateway). */
const CODE_DIRS: Record<string, string[]> = { gateway: ['src', 'console'] };

/** Declared but loaded in ways the text scan does not see, each with why. */
const LOADED_INDIRECTLY: Record<string, string[]> = {
  // telemetry.ts loads the SDK and the instrumentations with require() only when OTEL_* asks for tracing.
  'packages/kit': ['@opentelemetry/sdk-node', '@opentelemetry/auto-instrumentations-node'],
  // /docs serves Swagger UI's files, which scripts/build-docs.mjs copies (and compresses) from the package's folder.
  gateway: ['swagger-ui-dist'],
};

/**
 * Workspace packages a published package bundles into its dist/ (scripts/release-pack.mjs marks only its declared
 * dependencies external), so its users never install them: the CLI carries the webhook signing of @svc/contracts.
 */
const BUNDLED: Record<string, string[]> = {
  'packages/cli': ['@svc/contracts'],
};

function files(dir: string, out: string[] = [], withTests = false): string[] {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (name === 'node_modules' || name === 'dist' || name === 'generated-fixtures' || name === 'public') continue;
    if (statSync(path).isDirectory()) files(path, out, withTests);
    else if (/\.(ts|tsx|js|mjs|cjs)$/.test(name) && (withTests || !/\.test\.tsx?$/.test(name))) out.push(path);
  }
  return out;
}

const packageOf = (specifier: string) => (specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]);

function imported(workspace: string): Set<string> {
  const used = new Set<string>();
  for (const dir of CODE_DIRS[workspace] ?? ['src']) {
    const base = join(ROOT, workspace, dir);
    try {
      statSync(base);
    } catch {
      continue;
    }
    for (const file of files(base)) {
      const text = readFileSync(file, 'utf8');
      // Code, not prose: a template literal's text (the docs page's sample code) is left out.
      const code = text
        .replace(/\/\*[\s\S]*?\*\//g, '')
        .replace(/(^|\s)\/\/.*$/gm, '$1')
        .replace(/`[^`]*`/g, '``');
      for (const m of code.matchAll(/(?:from\s+|import\(\s*|require\(\s*)['"]([^'".][^'"]*)['"]/g)) {
        if (isBuiltin(m[1]) || m[1].startsWith('node:')) continue;
        used.add(packageOf(m[1]));
      }
    }
  }
  return used;
}

/** The peer dependencies of `pkg` as installed for the workspace at `from` (its own node_modules, else the root's). */
function peerDependenciesOf(pkg: string, from: string): string[] {
  for (const dir of [join(from, 'node_modules'), join(ROOT, 'node_modules')]) {
    try {
      return Object.keys(JSON.parse(readFileSync(join(dir, pkg, 'package.json'), 'utf8')).peerDependencies ?? {});
    } catch {
      // not installed there
    }
  }
  return [];
}

describe.each(WORKSPACES.filter((w) => statSync(join(ROOT, w)).isDirectory()))('%s', (workspace) => {
  it('declares what it imports, and imports what it declares', () => {
    const manifest = JSON.parse(readFileSync(join(ROOT, workspace, 'package.json'), 'utf8'));
    const declared = new Set(Object.keys({ ...manifest.dependencies, ...manifest.peerDependencies }));
    const used = imported(workspace);
    used.delete(manifest.name);
    const undeclared = [...used].filter((p) => !declared.has(p) && !(BUNDLED[workspace] ?? []).includes(p)).sort();
    // A used package's peer dependencies are declared beside it, as npm asks.
    const peers = new Set([...used].flatMap((p) => peerDependenciesOf(p, join(ROOT, workspace))));
    const unused = [...declared].filter((p) => !used.has(p) && !peers.has(p) && !(LOADED_INDIRECTLY[workspace] ?? []).includes(p)).sort();
    expect({ undeclared, unused }).toEqual({ undeclared: [], unused: [] });
  });
});

describe('exports maps', () => {
  it.each(WORKSPACES.filter((w) => statSync(join(ROOT, w)).isDirectory()))('%s has one, and each target exists', (workspace) => {
    const exportsMap = JSON.parse(readFileSync(join(ROOT, workspace, 'package.json'), 'utf8')).exports;
    expect(typeof exportsMap).toBe('object');
    expect(Object.keys(exportsMap ?? {})).toContain('.');
    const targets = Object.values<unknown>(exportsMap ?? {}).filter((t): t is string => typeof t === 'string');
    expect(targets.filter((t) => !existsSync(join(ROOT, workspace, t)))).toEqual([]);
  });

  it("no code, test, benchmark or script imports another workspace's src/ (only what its exports map names)", () => {
    const offenders: string[] = [];
    for (const dir of [...WORKSPACES, 'test', 'bench', 'scripts']) {
      for (const file of files(join(ROOT, dir), [], true)) {
        const text = readFileSync(file, 'utf8');
        for (const m of text.matchAll(/(?:from\s+|import\s*\(?\s*|require\(\s*)['"](@svc\/[^/'"]+\/src(?:\/[^'"]*)?)['"]/g)) {
          offenders.push(`${file.slice(ROOT.length + 1)}: ${m[1]}`);
        }
      }
    }
    expect(offenders).toEqual([]);
  });
});
