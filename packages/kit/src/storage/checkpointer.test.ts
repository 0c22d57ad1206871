import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openSqliteStore } from './sqlite';
import type { CollectionDef } from './types';

interface Note {
  id: string;
  text: string;
}
const notes: CollectionDef<Note> = { name: 'notes' };

const sleep = (ms: number) => new Promise((ok) => setTimeout(ok, ms));

test('the checkpointer thread keeps the WAL to about one burst of commits, not the writer-side bound', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'checkpointer-'));
  const path = join(dir, 'store.db');
  const store = openSqliteStore({ path });
  try {
    const burst = async (n: number) => {
      for (let i = 0; i < 40; i++) {
        await store.transaction(async (tx) => {
          await tx.collection(notes).insert({ id: `n${n}_${i}`, text: 'x'.repeat(3000) });
        });
      }
    };
    await burst(0);
    const oneBurst = statSync(`${path}-wal`).size;
    for (let n = 1; n <= 8; n++) {
      await sleep(400); // the checkpoint runs ~100 ms after the last commit; the next write then restarts the WAL
      await burst(n);
    }
    // Without checkpoints in between, nine bursts would have grown it about ninefold (the writer's own bound is
    // 4000 pages, far above this).
    expect(statSync(`${path}-wal`).size).toBeLessThan(oneBurst * 3);
    expect((await store.collection(notes).find({}, { limit: 1000 })).items).toHaveLength(9 * 40);
  } finally {
    await store.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
