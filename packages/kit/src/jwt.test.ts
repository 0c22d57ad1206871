import { exportJWK, generateKeyPair, SignJWT, type JWK } from 'jose';
import { AppError } from './errors';
import { JWT_ALG, JwtVerifier } from './jwt';

async function signer(kid: string) {
  const { privateKey, publicKey } = await generateKeyPair(JWT_ALG, { extractable: true });
  const jwk: JWK = { ...(await exportJWK(publicKey)), kid, alg: JWT_ALG, use: 'sig' };
  const sign = () =>
    new SignJWT({ tid: 'ten_1', typ: 'user', role: 'owner', sid: 'ses_1' })
      .setProtectedHeader({ alg: JWT_ALG, kid, typ: 'JWT' })
      .setSubject('usr_1')
      .setIssuer('iss')
      .setAudience('aud')
      .setIssuedAt()
      .setExpirationTime('5m')
      .setJti(`jti_${Math.random()}`)
      .sign(privateKey);
  return { jwk, sign };
}

it('accepts a token of a key published after its last fetch at once, with one more fetch', async () => {
  const a = await signer('key_a');
  const b = await signer('key_b');
  const published: JWK[] = [a.jwk];
  let fetches = 0;
  const verifier = new JwtVerifier({
    issuer: 'iss',
    audience: 'aud',
    fetchJwks: async () => {
      fetches++;
      return { keys: [...published] };
    },
  });
  await expect(verifier.verify(await a.sign())).resolves.toMatchObject({ sub: 'usr_1', tid: 'ten_1' });
  // Another replica starts signing with a key stored after this verifier's fetch (a rotation, a replica's first key).
  published.push(b.jwk);
  await expect(verifier.verify(await b.sign())).resolves.toMatchObject({ sub: 'usr_1' });
  expect(fetches).toBe(2);
  // Known keys need no fetch.
  await verifier.verify(await a.sign());
  await verifier.verify(await b.sign());
  expect(fetches).toBe(2);
});

it('refuses forged kids with 401 and fetches at most once per interval however many arrive', async () => {
  const a = await signer('key_a');
  let fetches = 0;
  const verifier = new JwtVerifier({
    issuer: 'iss',
    audience: 'aud',
    minRefreshMs: 200,
    fetchJwks: async () => {
      fetches++;
      return { keys: [a.jwk] };
    },
  });
  await verifier.verify(await a.sign());
  const started = performance.now();
  for (let round = 0; round < 5; round++) {
    const forged = await Promise.all(Array.from({ length: 20 }, (_, i) => signer(`forged_${round}_${i}`).then((s) => s.sign())));
    const results = await Promise.all(forged.map((t) => verifier.verify(t).catch((e: unknown) => e)));
    for (const r of results) expect(r).toMatchObject({ code: 'UNAUTHORIZED', message: 'Access token is not valid' });
  }
  const intervals = Math.ceil((performance.now() - started) / 200);
  // The first fetch, then at most one per interval (100 forged tokens).
  expect(fetches).toBeGreaterThan(1);
  expect(fetches).toBeLessThanOrEqual(1 + intervals + 1);
});

it('reports an unreachable key source instead of calling a genuine token invalid', async () => {
  const a = await signer('key_a');
  const b = await signer('key_b');
  let up = true;
  const verifier = new JwtVerifier({
    issuer: 'iss',
    audience: 'aud',
    minRefreshMs: 10,
    fetchJwks: async () => {
      if (!up) throw new AppError('SERVICE_UNAVAILABLE', 'identity unavailable');
      return { keys: [a.jwk] };
    },
  });
  await verifier.verify(await a.sign());
  up = false;
  await expect(verifier.verify(await b.sign())).rejects.toMatchObject({ code: 'SERVICE_UNAVAILABLE' });
  expect(verifier.loaded).toBe(true);
});
