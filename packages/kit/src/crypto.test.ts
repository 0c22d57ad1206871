import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawn } from 'node:child_process';
import { loadSecretBox, SecretBox } from './crypto';

describe('SecretBox', () => {
  it('round-trips, uses a fresh IV each time, and detects tampering', () => {
    const box = new SecretBox([{ id: 'k1', key: randomBytes(32) }]);
    const a = box.encrypt('sk-live-123');
    const b = box.encrypt('sk-live-123');
    expect(a).not.toBe(b);
    expect(a).not.toContain('sk-live');
    expect(box.decrypt(a)).toBe('sk-live-123');
    const parts = a.split('.');
    parts[4] = Buffer.from('tampered').toString('base64url');
    expect(() => box.decrypt(parts.join('.'))).toThrow();
  });

  it('reads values sealed with an older key after rotation', () => {
    const oldKey = randomBytes(32).toString('base64');
    const newKey = randomBytes(32).toString('base64');
    const before = loadSecretBox(oldKey, '/nonexistent', true);
    const sealed = before.encrypt('value');
    const after = loadSecretBox(`${newKey},${oldKey}`, '/nonexistent', true);
    expect(after.decrypt(sealed)).toBe('value');
    expect(after.encrypt('v2').split('.')[1]).not.toBe(sealed.split('.')[1]);
  });

  it('generates and keeps a key file (0600) when no master key is set, and refuses that in production', () => {
    const dir = mkdtempSync(join(tmpdir(), 'box-'));
    const one = loadSecretBox(undefined, dir, false);
    const two = loadSecretBox(undefined, dir, false);
    expect(two.decrypt(one.encrypt('persisted'))).toBe('persisted');
    expect(statSync(join(dir, 'master.key')).mode & 0o777).toBe(0o600);
    expect(Buffer.from(readFileSync(join(dir, 'master.key'), 'utf8'), 'base64')).toHaveLength(32);
    expect(() => loadSecretBox(undefined, dir, true)).toThrow(/SVC_MASTER_KEY is required/);
  });

  it('gives processes that start at once on a fresh data directory one and the same key', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'box-race-'));
    // Every process waits for the same instant, then reads or creates the key: the window a half-written file
    // used to leave open (a CI run saw "master key k1 must be 32 bytes") is hit by one of them or another.
    const at = Date.now() + 4000;
    const script = `const { loadSecretBox } = require(${JSON.stringify(join(__dirname, 'crypto.ts'))});
      while (Date.now() < ${at});
      process.stdout.write(loadSecretBox(undefined, ${JSON.stringify(dir)}, false).encrypt('from ' + process.pid));`;
    const run = () =>
      new Promise<{ code: number | null; out: string }>((done) => {
        const child = spawn(process.execPath, ['--import', 'tsx', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
        let out = '';
        child.stdout.on('data', (c: Buffer) => (out += c.toString()));
        child.once('exit', (code) => done({ code, out }));
      });
    const results = await Promise.all(Array.from({ length: 12 }, run));
    expect(results.map((r) => r.code)).toEqual(Array(12).fill(0));
    const box = loadSecretBox(undefined, dir, false);
    for (const r of results) expect(box.decrypt(r.out)).toMatch(/^from \d+$/);
    expect(readdirSync(dir)).toEqual(['master.key']); // no drafts left behind
  }, 60_000);
});
