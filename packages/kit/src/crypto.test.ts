import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
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
});
