import { createCipheriv, createDecipheriv, hash, randomBytes, timingSafeEqual } from 'node:crypto';
import { existsSync, linkSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

export function sha256Hex(value: string | Buffer): string {
  return hash('sha256', value, 'hex'); // one-shot: under half of createHash's cost, on every request's cache lookup
}

export function safeEqual(a: string, b: string): boolean {
  const ab = Buffer.from(a);
  const bb = Buffer.from(b);
  return ab.length === bb.length && timingSafeEqual(ab, bb);
}

/**
 * AES-256-GCM for secrets at rest. Ciphertexts are `v1.<keyId>.<iv>.<tag>.<data>` (base64url) so the master
 * key can be rotated: older key ids stay readable while new writes use the current key.
 */
export class SecretBox {
  private readonly keys = new Map<string, Buffer>();
  private readonly currentId: string;

  constructor(keys: Array<{ id: string; key: Buffer }>) {
    if (!keys.length) throw new Error('SecretBox needs at least one key');
    for (const { id, key } of keys) {
      if (key.length !== 32) throw new Error(`master key ${id} must be 32 bytes`);
      this.keys.set(id, key);
    }
    this.currentId = keys[0].id;
  }

  encrypt(plain: string): string {
    const iv = randomBytes(12);
    const cipher = createCipheriv('aes-256-gcm', this.keys.get(this.currentId)!, iv);
    const data = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
    const parts = [iv, cipher.getAuthTag(), data].map((b) => b.toString('base64url'));
    return ['v1', this.currentId, ...parts].join('.');
  }

  decrypt(sealed: string): string {
    const [version, keyId, iv, tag, data] = sealed.split('.');
    const key = this.keys.get(keyId);
    if (version !== 'v1' || !key) throw new Error('cannot decrypt: unknown format or key');
    const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(iv, 'base64url'));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(data, 'base64url')), decipher.final()]).toString('utf8');
  }
}

/**
 * The master key from `SVC_MASTER_KEY` (comma list of base64 keys, newest first), or, for the embedded
 * single-machine mode, one generated once and kept (mode 0600) under the data directory.
 */
export function loadSecretBox(masterKey: string | undefined, dataDir: string, production: boolean): SecretBox {
  if (masterKey) {
    return new SecretBox(masterKey.split(',').map((k, i, all) => ({ id: `k${all.length - i}`, key: Buffer.from(k.trim(), 'base64') })));
  }
  if (production) throw new Error('SVC_MASTER_KEY is required when NODE_ENV=production');
  const file = `${dataDir}/master.key`;
  if (!existsSync(file)) {
    mkdirSync(dirname(file), { recursive: true });
    // Written whole under a private name, then linked into place: processes starting at once never read a file
    // another one is still writing, and a link never replaces the key another process already put there.
    const draft = `${file}.${process.pid}.${randomBytes(4).toString('hex')}`;
    writeFileSync(draft, randomBytes(32).toString('base64'), { mode: 0o600, flag: 'wx' });
    try {
      linkSync(draft, file);
    } catch (err) {
      // Another process of this machine created it first: use theirs.
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
    } finally {
      unlinkSync(draft);
    }
  }
  return new SecretBox([{ id: 'k1', key: Buffer.from(readFileSync(file, 'utf8').trim(), 'base64') }]);
}
