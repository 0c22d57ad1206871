import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import {
  checkUrlShape,
  egressFetch,
  EgressError,
  egressPolicyFrom,
  egressRequest,
  egressStream,
  refusedAddress,
  resolveAndCheck,
} from './egress';

let server: Server;
let port: number;
const hits: string[] = [];

beforeAll(async () => {
  server = createServer((req, res) => {
    hits.push(req.url!);
    if (req.url === '/redirect') {
      res.writeHead(302, { location: `http://127.0.0.1:${port}/target` }).end();
    } else if (req.url === '/slow') {
      setTimeout(() => res.end('late'), 2000).unref();
    } else if (req.url === '/big') {
      res.writeHead(200);
      const chunk = Buffer.alloc(64 * 1024, 97);
      for (let i = 0; i < 32; i++) res.write(chunk); // 2 MiB
      res.end();
    } else {
      res.end(`hello ${req.headers.host}`);
    }
  });
  await new Promise<void>((ok) => server.listen(0, '127.0.0.1', ok));
  port = (server.address() as AddressInfo).port;
});
afterAll(() => new Promise((ok) => server.close(ok)));

/** A resolver that answers from a table, as DNS would: lets a test point a name at any address. */
function fakeDns(table: Record<string, string>) {
  return (
    host: string,
    _o: { all: true },
    cb: (err: NodeJS.ErrnoException | null, a: Array<{ address: string; family: number }>) => void,
  ) => {
    const address = table[host];
    if (!address) return cb(Object.assign(new Error('ENOTFOUND'), { code: 'ENOTFOUND' }), []);
    cb(null, [{ address, family: address.includes(':') ? 6 : 4 }]);
  };
}

async function refusal(p: Promise<unknown>): Promise<string> {
  try {
    await p;
  } catch (err) {
    if (err instanceof EgressError) return err.reason;
    throw err;
  }
  throw new Error('expected a refusal');
}

describe('address rules', () => {
  const closed = { allowPrivate: false };
  it.each([
    '127.0.0.1',
    '10.1.2.3',
    '172.20.0.1',
    '192.168.1.1',
    '169.254.1.1',
    '100.64.0.1',
    '0.0.0.0',
    '::1',
    '::',
    'fd12::1',
    'fe80::1',
    '::ffff:127.0.0.1',
    '::ffff:10.0.0.1',
    // Found from outside (issue 13): documentation, special-purpose and translated forms of inside addresses.
    '192.0.2.1',
    '198.51.100.7',
    '203.0.113.9',
    '192.88.99.1',
    '198.18.0.1',
    '240.0.0.1',
    '255.255.255.255',
    '224.0.0.1',
    '100::1',
    '2001::1',
    '2001:2::1',
    '2001:db8::1',
    '::127.0.0.1',
    '::ffff:0:7f00:1',
    '64:ff9b::7f00:1',
    '64:ff9b::a00:1',
    '64:ff9b:1::1',
    '2002:7f00:1::1',
    '2002:c000:201::1',
    'ff02::1',
  ])('refuses %s unless private egress is allowed', (addr) => {
    expect(refusedAddress(addr, closed)).toMatch(/address/);
    expect(refusedAddress(addr, { allowPrivate: true })).toBeNull();
  });

  it.each(['93.184.216.34', '8.8.8.8', '2606:4700::1111', '::ffff:8.8.8.8', '64:ff9b::808:808', '2002:808:808::1'])(
    'lets the public address %s through (translated forms judged by the IPv4 inside)',
    (addr) => {
      expect(refusedAddress(addr, closed)).toBeNull();
    },
  );

  it.each([
    ['a documentation address', '192.0.2.10'],
    ['an IPv4-compatible loopback', '::127.0.0.1'],
    ['a NAT64 form of loopback', '64:ff9b::7f00:1'],
    ['a 6to4 form of a private address', '2002:a00:1::1'],
  ])('refuses a name that resolves to %s, at registration and at connect time', async (_label, inside) => {
    const lookup = fakeDns({ 'inside.example.test': inside });
    await expect(resolveAndCheck('http://inside.example.test/', { allowPrivate: false }, lookup)).rejects.toMatchObject({
      reason: 'address',
    });
    const before = hits.length;
    expect(await refusal(egressFetch({ allowPrivate: false, lookup })(`http://inside.example.test:${port}/ok`))).toBe('address');
    expect(hits.length).toBe(before);
  });

  it('refuses cloud metadata addresses even when private egress is allowed', () => {
    for (const addr of ['169.254.169.254', 'fd00:ec2::254']) expect(refusedAddress(addr, { allowPrivate: true })).toMatch(/metadata/);
  });

  it('accepts only http(s) URLs without credentials', () => {
    for (const bad of [
      'file:///etc/passwd',
      'gopher://example.com/',
      'ftp://example.com/',
      'javascript:alert(1)',
      'not a url',
      'http://user:pw@example.com/',
    ])
      expect(() => checkUrlShape(bad, { allowPrivate: true })).toThrow(EgressError);
    expect(checkUrlShape('https://example.com/hook', closed).hostname).toBe('example.com');
    expect(() => checkUrlShape('http://[::1]:8080/', closed)).toThrow(/loopback/);
    expect(() => checkUrlShape('http://localhost:8080/', closed)).toThrow(/loopback/);
    expect(() => checkUrlShape('http://localhost.:8080/', closed)).toThrow(/loopback/);
    expect(() => checkUrlShape('http://api.localhost.:8080/', closed)).toThrow(/loopback/);
  });

  it('checks what a host name resolves to', async () => {
    const lookup = fakeDns({ 'public.test': '93.184.216.34', 'inside.test': '10.0.0.7' });
    await expect(resolveAndCheck('https://public.test/x', closed, lookup)).resolves.toBeInstanceOf(URL);
    expect(await refusal(resolveAndCheck('https://inside.test/x', closed, lookup))).toBe('address');
    expect(await refusal(resolveAndCheck('https://nowhere.test/x', closed, lookup))).toBe('dns');
  });

  it('reads EGRESS_ALLOW_PRIVATE, defaulting to allowed outside production', () => {
    expect(egressPolicyFrom({ nodeEnv: 'development' }).allowPrivate).toBe(true);
    expect(egressPolicyFrom({ nodeEnv: 'production' }).allowPrivate).toBe(false);
    expect(egressPolicyFrom({ nodeEnv: 'production', egressAllowPrivate: true }).allowPrivate).toBe(true);
    expect(egressPolicyFrom({ nodeEnv: 'development', egressAllowPrivate: false }).allowPrivate).toBe(false);
  });
});

describe('egressFetch against a real local server', () => {
  it('reaches an allowed address and returns the body', async () => {
    const f = egressFetch({ allowPrivate: true });
    const res = await f(`http://127.0.0.1:${port}/ok`);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(`hello 127.0.0.1:${port}`);
  });

  it('refuses a private IP literal before sending anything', async () => {
    const before = hits.length;
    expect(await refusal(egressFetch({ allowPrivate: false })(`http://127.0.0.1:${port}/ok`))).toBe('address');
    expect(hits.length).toBe(before);
  });

  it('checks the address at connect time: a name that now resolves to loopback is refused (DNS rebinding)', async () => {
    const lookup = fakeDns({ 'hooks.example.test': '127.0.0.1' });
    // At registration the name looked public...
    await expect(
      resolveAndCheck('http://hooks.example.test/', { allowPrivate: false }, fakeDns({ 'hooks.example.test': '93.184.216.34' })),
    ).resolves.toBeInstanceOf(URL);
    // ...at delivery it points inside.
    const before = hits.length;
    expect(await refusal(egressFetch({ allowPrivate: false, lookup })(`http://hooks.example.test:${port}/ok`))).toBe('address');
    expect(hits.length).toBe(before);
    // With private egress allowed the same name connects to the resolved address.
    const res = await egressFetch({ allowPrivate: true, lookup })(`http://hooks.example.test:${port}/ok`);
    expect(await res.text()).toBe(`hello hooks.example.test:${port}`);
  });

  it('returns redirects without following them', async () => {
    const before = hits.length;
    const res = await egressFetch({ allowPrivate: true })(`http://127.0.0.1:${port}/redirect`);
    expect(res.status).toBe(302);
    expect(hits.slice(before)).toEqual(['/redirect']);
  });

  it('times out a slow receiver', async () => {
    expect(await refusal(egressFetch({ allowPrivate: true, timeoutMs: 200 })(`http://127.0.0.1:${port}/slow`))).toBe('timeout');
  });

  it('caps the response size', async () => {
    const res = await egressFetch({ allowPrivate: true, maxResponseBytes: 1024 * 1024 })(`http://127.0.0.1:${port}/big`);
    expect(await refusal(res.arrayBuffer())).toBe('too_large');
    const whole = await egressFetch({ allowPrivate: true })(`http://127.0.0.1:${port}/big`);
    expect((await whole.arrayBuffer()).byteLength).toBe(2 * 1024 * 1024);
  });

  it('passes a caller abort through as an abort, not a timeout', async () => {
    const ctl = new AbortController();
    const p = egressFetch({ allowPrivate: true, timeoutMs: 5000 })(`http://127.0.0.1:${port}/slow`, { signal: ctl.signal });
    setTimeout(() => ctl.abort(), 50);
    await expect(p).rejects.toMatchObject({ name: 'AbortError' });
  });
});

describe('egressRequest (the same guard on undici.request) against a real local server', () => {
  const post = { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' };

  it('reaches an allowed address and gives the status and an excerpt of the body', async () => {
    const res = await egressRequest({ allowPrivate: true })(`http://127.0.0.1:${port}/ok`, post);
    expect(res.status).toBe(200);
    expect(await res.excerpt(5)).toBe('hello');
  });

  it('refuses a private IP literal, and a name that resolves inside, before sending anything', async () => {
    const before = hits.length;
    expect(await refusal(egressRequest({ allowPrivate: false })(`http://127.0.0.1:${port}/ok`, post))).toBe('address');
    const lookup = fakeDns({ 'hooks.example.test': '127.0.0.1' });
    expect(await refusal(egressRequest({ allowPrivate: false, lookup })(`http://hooks.example.test:${port}/ok`, post))).toBe('address');
    expect(await refusal(egressRequest({ allowPrivate: false })('gopher://example.com/', post))).toBe('scheme');
    expect(hits.length).toBe(before);
  });

  it('returns redirects without following them', async () => {
    const before = hits.length;
    const res = await egressRequest({ allowPrivate: true })(`http://127.0.0.1:${port}/redirect`, post);
    expect(res.status).toBe(302);
    await res.excerpt(0);
    expect(hits.slice(before)).toEqual(['/redirect']);
  });

  it('times out a slow receiver', async () => {
    expect(await refusal(egressRequest({ allowPrivate: true, timeoutMs: 200 })(`http://127.0.0.1:${port}/slow`, post))).toBe('timeout');
  });

  it('keeps only the excerpt of a large body and stops reading at the cap', async () => {
    const res = await egressRequest({ allowPrivate: true, maxResponseBytes: 256 * 1024 })(`http://127.0.0.1:${port}/big`, post);
    const text = await res.excerpt(1024);
    expect(text).toBe('a'.repeat(1024));
  });
});

describe('egressStream (the guard on undici.request, the body handed on as a Node readable)', () => {
  const post = { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' };
  const read = async (body: AsyncIterable<Buffer>) => {
    const chunks: Buffer[] = [];
    for await (const chunk of body) chunks.push(chunk);
    return Buffer.concat(chunks).toString();
  };

  it('reaches an allowed address and gives the whole body, and refuses a private one before sending anything', async () => {
    const res = await egressStream({ allowPrivate: true })(`http://127.0.0.1:${port}/ok`, post);
    expect(res.status).toBe(200);
    expect(await read(res.body)).toBe(`hello 127.0.0.1:${port}`);
    const before = hits.length;
    expect(await refusal(egressStream({ allowPrivate: false })(`http://127.0.0.1:${port}/ok`, post))).toBe('address');
    const lookup = fakeDns({ 'llm.example.test': '127.0.0.1' });
    expect(await refusal(egressStream({ allowPrivate: false, lookup })(`http://llm.example.test:${port}/ok`, post))).toBe('address');
    expect(hits.length).toBe(before);
  });

  it('fails a body past the size cap, and returns redirects without following them', async () => {
    const big = await egressStream({ allowPrivate: true, maxResponseBytes: 256 * 1024 })(`http://127.0.0.1:${port}/big`, post);
    await expect(read(big.body)).rejects.toMatchObject({ code: 'UND_ERR_RES_EXCEEDED_MAX_SIZE' });
    const whole = await egressStream({ allowPrivate: true })(`http://127.0.0.1:${port}/big`, post);
    expect((await read(whole.body)).length).toBe(2 * 1024 * 1024);
    const moved = await egressStream({ allowPrivate: true })(`http://127.0.0.1:${port}/redirect`, post);
    expect(moved.status).toBe(302);
    await read(moved.body);
  });

  it('times out a slow answer', async () => {
    expect(await refusal(egressStream({ allowPrivate: true, timeoutMs: 200 })(`http://127.0.0.1:${port}/slow`, post))).toBe('timeout');
  });
});
