import { exportJWK, generateKeyPair, importJWK, SignJWT, type JWK, type KeyLike } from 'jose';
import { JWT_ALG, newId, nowIso, type SecretBox, type Store } from '@svc/kit';
import { signingKeys, type SigningKeyDoc } from './collections';

/**
 * The token signing keys: one active ES256 key signs; retired keys stay in the JWKS until tokens signed with
 * them have expired. Private keys are kept encrypted with the master key.
 */
export class SigningKeys {
  private active: { kid: string; key: KeyLike } | null = null;
  private jwks: { keys: JWK[] } = { keys: [] };

  constructor(
    private readonly store: Store,
    private readonly box: SecretBox,
  ) {}

  async load(): Promise<void> {
    const col = this.store.collection(signingKeys);
    let current = await col.findOne({ status: 'active' });
    if (!current) current = await this.create();
    await this.use(current);
  }

  /** Makes a new key the signer and retires the old one (still published for verification). */
  async rotate(): Promise<string> {
    const col = this.store.collection(signingKeys);
    const previous = await col.findOne({ status: 'active' });
    const next = await this.create();
    if (previous) await col.update(previous.id, { status: 'active' }, { status: 'retired' });
    await this.use(next);
    return next.id;
  }

  getJwks(): { keys: JWK[] } {
    return this.jwks;
  }

  async sign(
    claims: Record<string, unknown>,
    options: { issuer: string; audience: string; ttlSeconds: number; jti: string },
  ): Promise<string> {
    if (!this.active) throw new Error('signing keys not loaded');
    // `iat` has whole seconds; `ims` is the same instant in milliseconds, so that a revocation of a user (role
    // change, removal) refuses exactly the tokens issued before it, not those issued later in the same second.
    const now = Date.now();
    const iat = Math.floor(now / 1000);
    return new SignJWT({ ...claims, ims: now })
      .setProtectedHeader({ alg: JWT_ALG, kid: this.active.kid, typ: 'JWT' })
      .setIssuer(options.issuer)
      .setAudience(options.audience)
      .setIssuedAt(iat)
      .setExpirationTime(iat + options.ttlSeconds)
      .setJti(options.jti)
      .sign(this.active.key);
  }

  private async create(): Promise<SigningKeyDoc> {
    const { privateKey, publicKey } = await generateKeyPair(JWT_ALG, { extractable: true });
    const kid = newId('key');
    const doc: SigningKeyDoc = {
      id: kid,
      privateJwk: this.box.encrypt(JSON.stringify(await exportJWK(privateKey))),
      publicJwk: JSON.stringify({ ...(await exportJWK(publicKey)), kid, alg: JWT_ALG, use: 'sig' }),
      status: 'active',
      createdAt: nowIso(),
    };
    await this.store.collection(signingKeys).insert(doc);
    return doc;
  }

  private async use(doc: SigningKeyDoc): Promise<void> {
    const key = (await importJWK(JSON.parse(this.box.decrypt(doc.privateJwk)) as JWK, JWT_ALG)) as KeyLike;
    this.active = { kid: doc.id, key };
    const published = await this.store.collection(signingKeys).find({}, { limit: 5 });
    this.jwks = { keys: published.items.map((k) => JSON.parse(k.publicJwk) as JWK) };
  }
}
