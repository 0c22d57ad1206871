import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { openEmbeddedBus, OutboxRelay, sha256Hex, type EventBus, type Store } from '@svc/kit';
import { projects } from './collections';
import { callWithKey, openProjectsStore, projectsOn } from '../test/fixtures/store';

// CONTRACT.md 14: the projects process is SIGKILLed between the create's commit and its answer (the gateway then
// sees UNAVAILABLE, keeps nothing and lets the retry through); the retry with the same key answers that project, and
// there is one project. On the service's real SQLite store, with a real process kill.
jest.setTimeout(60_000);

const repoRoot = resolve(__dirname, '../../..');
let dir: string;
let store: Store;
let bus: EventBus;

beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'projects-idem-'));
});
afterEach(async () => {
  await bus?.close();
  await store?.close();
  rmSync(dir, { recursive: true, force: true });
});

it('a crash after the create committed: the same key answers that project, created once', async () => {
  const key = sha256Hex('ten_a|tenant|create-once');
  const fixture = join(__dirname, '../test/fixtures', 'crash-create.ts');
  const child = spawn(process.execPath, ['--import', 'tsx', fixture, join(dir, 'projects.db'), join(dir, 'bus.db'), 'ten_a', key], {
    cwd: repoRoot,
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((done) => child.on('exit', (c, s) => done([c, s])));
  expect([signal, code, stderr]).toEqual(['SIGKILL', null, '']);

  store = await openProjectsStore(join(dir, 'projects.db'));
  bus = openEmbeddedBus({ path: join(dir, 'bus.db') });
  const handlers = await projectsOn(store, new OutboxRelay(store, bus));
  const created = async () =>
    (await store.collection(projects).find({ tenantId: 'ten_a' }, { limit: 10 })).items.filter((p) => p.name === 'once');
  const [before] = await created();
  expect(before).toMatchObject({ name: 'once' });
  const answer = await handlers.createProject({ name: 'once', description: '', language: '' }, callWithKey('ten_a', key));
  expect(answer.project).toMatchObject({ id: before.id, name: 'once' });
  expect((await created()).map((p) => p.id)).toEqual([before.id]);
  // Without a key each create is its own.
  await handlers.createProject({ name: 'once', description: '', language: '' }, callWithKey('ten_a', null));
  expect(await created()).toHaveLength(2);
  handlers.stop();
});
