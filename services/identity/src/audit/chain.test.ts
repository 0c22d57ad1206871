import { createHash } from 'node:crypto';
import { type AuditEntryView, canonicalJson, ChainVerifier, entryHash, redact } from './chain';

describe('canonicalJson', () => {
  it('sorts keys at every depth, drops undefined members and writes no whitespace', () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: true, y: null }], c: 'x' }, u: undefined })).toBe(
      '{"a":{"c":"x","d":[3,{"y":null,"z":true}]},"b":1}',
    );
  });

  it('is the same for objects built in any key order', () => {
    expect(canonicalJson({ x: 1, y: { p: 'q', r: [1, 2] } })).toBe(canonicalJson({ y: { r: [1, 2], p: 'q' }, x: 1 }));
  });

  it('escapes strings as JSON does and keeps array order', () => {
    expect(canonicalJson(['b', 'a', 'é"\n'])).toBe('["b","a","é\\"\\n"]');
  });

  it('refuses values JSON cannot hold', () => {
    expect(() => canonicalJson({ n: Number.NaN })).toThrow(TypeError);
    expect(() => canonicalJson({ f: () => 1 })).toThrow(TypeError);
  });
});

function chain(n: number): AuditEntryView[] {
  const out: AuditEntryView[] = [];
  let prev: string | null = null;
  for (let i = 0; i < n; i++) {
    const base: Omit<AuditEntryView, 'hash'> = {
      id: `aud_${i}`,
      at: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
      actor: { type: 'user', id: 'usr_1', email: 'a@example.com' },
      action: 'api_key.created',
      target: { type: 'api_key', id: `key_${i}` },
      ip: '10.0.0.1',
      userAgent: 'jest',
      requestId: `req-${i}`,
      changes: { before: null, after: { name: `k${i}` } },
      prevHash: prev,
    };
    const hash = entryHash(base);
    out.push({ ...base, hash });
    prev = hash;
  }
  return out;
}

describe('entryHash', () => {
  it('is the SHA-256 hex of the canonical JSON of the entry without hash', () => {
    const [e] = chain(1);
    const { hash, ...rest } = e;
    expect(hash).toBe(createHash('sha256').update(canonicalJson(rest)).digest('hex'));
    expect(entryHash(e)).toBe(hash); // a `hash` member present is left out
  });
});

describe('ChainVerifier', () => {
  const verify = (entries: AuditEntryView[], head?: string | null) => {
    const v = new ChainVerifier();
    for (const e of entries) v.add(e);
    return v.result(head, entries.at(-1)?.id ?? null);
  };

  it('accepts an unbroken chain and counts its entries', () => {
    const c = chain(5);
    expect(verify(c, c[4].hash)).toEqual({ valid: true, entries: 5, firstBrokenId: null });
  });

  it('names the first entry whose content was changed', () => {
    const c = chain(5);
    c[2] = { ...c[2], changes: { before: null, after: { name: 'forged' } } };
    expect(verify(c, c[4].hash)).toEqual({ valid: false, entries: 5, firstBrokenId: 'aud_2' });
  });

  it('names the entry after one that was removed', () => {
    const c = chain(5);
    c.splice(1, 1);
    expect(verify(c, c.at(-1)!.hash).firstBrokenId).toBe('aud_2');
  });

  it('sees an entry removed from the end through the head', () => {
    const c = chain(5);
    const head = c[4].hash;
    expect(verify(c.slice(0, 4), head)).toMatchObject({ valid: false, firstBrokenId: 'aud_3' });
  });

  it('takes the prevHash of the oldest kept entry as given (retention)', () => {
    const c = chain(6).slice(3);
    expect(c[0].prevHash).not.toBeNull();
    expect(verify(c, c.at(-1)!.hash)).toEqual({ valid: true, entries: 3, firstBrokenId: null });
  });
});

describe('redact', () => {
  it('keeps fields that only look alike (limits, prefixes, flags)', () => {
    const limits = {
      tokensPerMinute: 5,
      requestsPerMinute: 7,
      start: 'svc_sdk_abcd',
      hasApiKey: true,
      keyPrefix: 'svc_sdk_abcd',
      version: 2,
    };
    expect(redact({ limits })).toEqual({ limits });
  });

  it('hides keys and secrets under any of their usual names', () => {
    const out = redact({
      apiKeySealed: 's',
      refreshToken: 'r',
      byosSecretKey: 'b',
      passwordHash: 'h',
      client_secret: 'c',
      privateKey: 'p',
    });
    expect(Object.values(out as object).every((v) => v === '[redacted]')).toBe(true);
  });

  it('hides values of secret-looking fields at any depth and keeps the rest', () => {
    expect(
      redact({ name: 'n', value: 's3cr3t', nested: { apiKey: 'sk-1', password: 'p', hasApiKey: true, list: [{ token: 't' }] } }),
    ).toEqual({
      name: 'n',
      value: '[redacted]',
      nested: { apiKey: '[redacted]', password: '[redacted]', hasApiKey: true, list: [{ token: '[redacted]' }] },
    });
  });
});
