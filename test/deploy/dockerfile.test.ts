/**
 * The image, read from the Dockerfile (no Docker engine runs here): a supported Node LTS, a runtime stage holding
 * only what the processes read (never test/, bench/ or docs/), OCI labels, a non-root user. And package.json's
 * engines, which the image's Node must satisfy while the code keeps running on Node 20.19 (these machines' Node).
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';

const ROOT = resolve(__dirname, '../..');
const source = readFileSync(resolve(ROOT, 'Dockerfile'), 'utf8');

interface Instruction {
  op: string;
  args: string;
}
/** Instructions with their continuation lines joined, comments dropped. */
const instructions: Instruction[] = source
  .replace(/\\\n/g, ' ')
  .split('\n')
  .map((l) => l.trim())
  .filter((l) => l && !l.startsWith('#'))
  .map((l) => {
    const [op, ...rest] = l.split(/\s+/);
    return { op: op.toUpperCase(), args: rest.join(' ') };
  });

/** Stages by name: the instructions from each FROM to the next. */
const stages = new Map<string, Instruction[]>();
let current: Instruction[] | null = null;
for (const i of instructions) {
  if (i.op === 'FROM') {
    current = [];
    stages.set(/\bAS\s+(\S+)/i.exec(i.args)?.[1] ?? String(stages.size), current);
  } else current?.push(i);
}
const runtime = [...stages.values()].at(-1)!;
const globalArgs = Object.fromEntries(
  instructions
    .slice(
      0,
      instructions.findIndex((i) => i.op === 'FROM'),
    )
    .filter((i) => i.op === 'ARG')
    .map((i) => i.args.split('=') as [string, string]),
);

/** `node:24-bookworm-slim` -> 24. */
const nodeMajor = (image: string) => Number(/^node:(\d+)/.exec(image)?.[1]);
const images = instructions
  .filter((i) => i.op === 'FROM')
  .map((i) => i.args.split(/\s+/)[0].replace('${NODE_IMAGE}', globalArgs.NODE_IMAGE));

it('builds and runs on a supported Node LTS (22 or 24), the same in every stage', () => {
  expect(new Set(images).size).toBe(1);
  expect([22, 24]).toContain(nodeMajor(images[0]));
});

it('asks for Node >= 20.19 in package.json, which the image satisfies and these machines run', () => {
  const pkg = JSON.parse(readFileSync(resolve(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } };
  expect(pkg.engines.node).toBe('>=20.19');
  const [major, minor] = process.versions.node.split('.').map(Number);
  expect(major > 20 || (major === 20 && minor >= 19)).toBe(true);
  expect(nodeMajor(images[0])).toBeGreaterThan(20);
});

describe('the runtime stage', () => {
  const copies = runtime.filter((i) => i.op === 'COPY' || i.op === 'ADD');

  it('copies only from the build stage: dist/, production dependencies, package.json, the health check and /runtime', () => {
    expect(copies.every((c) => c.op === 'COPY' && c.args.startsWith('--from=build '))).toBe(true);
    const sources = copies.map((c) => c.args.split(/\s+/)[1]).sort();
    expect(sources).toEqual(['/app/deploy/grpc-health.mjs', '/app/dist', '/app/node_modules', '/app/package.json', '/runtime/'].sort());
  });

  it('assembles /runtime from workspace node_modules and the services main.ts files only', () => {
    const assembly = stages.get('build')!.find((i) => i.op === 'RUN' && i.args.includes('/runtime'));
    const globs = /for d in ([^;]+);/
      .exec(assembly?.args ?? '')?.[1]
      .trim()
      .split(/\s+/);
    expect(globs).toBeDefined();
    for (const g of globs!) expect(g).toMatch(/(^|\/)node_modules$|^services\/\*\/src\/main\.ts$/);
    // The launcher (dist/start.js) lists the services by their main.ts: that is why they are there.
    expect(readFileSync(resolve(ROOT, 'scripts/start.ts'), 'utf8')).toContain("'src/main.ts'");
  });

  it('holds no tests, benchmarks, docs or sources, and no compilers', () => {
    const text = runtime.map((i) => `${i.op} ${i.args}`).join('\n');
    expect(text).not.toMatch(/COPY[^\n]*\s\.\s/); // no `COPY . .`
    expect(text).not.toMatch(/\b(test|bench|docs|scripts|packages\/\w+\/src)\//);
    expect(text).not.toMatch(/apt-get|g\+\+|python3/);
  });

  it('carries the OCI labels', () => {
    const labels = runtime
      .filter((i) => i.op === 'LABEL')
      .map((i) => i.args)
      .join(' ');
    for (const key of ['title', 'description', 'version', 'revision', 'source', 'created', 'base.name'])
      expect(labels).toContain(`org.opencontainers.image.${key}=`);
  });

  it('runs as a non-root user in production mode, the gateway by default', () => {
    expect(runtime.filter((i) => i.op === 'USER').at(-1)?.args).toBe('1000:1000');
    expect(runtime.find((i) => i.op === 'ENV')?.args).toContain('NODE_ENV=production');
    expect(JSON.parse(runtime.find((i) => i.op === 'CMD')!.args)).toEqual(['node', '--enable-source-maps', 'dist/gateway.js']);
  });
});
