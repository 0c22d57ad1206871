import { exportJWK, generateKeyPair, importJWK, SignJWT, type JWK, type KeyLike } from 'jose';
import { DuplicateKeyError, JWT_ALG, newId, nowIso, type SecretBox, type Store, type StoreSession } from '@svc/kit';
import { signingKeys, type SigningKeyDoc } from './collections';

/** Keys published in the JWKS: the newest generations (the signer and the ones before it, for tokens still alive). */
const PUBLISHED = 5;
/** How often a replica looks for a newer generation (another replica's rotation) before it signs. */
const RECHECK_MS = 10_000;

/**
 * The token signing keys, shared by every identity replica through the store. Keys are numbered by generation
 * (a unique index): the newest generation signs, and older ones stay published until tokens signed with them
 * have expired. A new generation is created by a conditional insert, so replicas starting (or rotating) at the
 * same moment converge on one key instead of each signing with its own. The JWKS is read from the store when
 * asked, so it holds every key any replica may sign with: a key is stored before anyone signs with it.
 * Private keys are kept encrypted with the master key.
 */
export class SigningKeys {
  private active: { kid: string; key: KeyLike; generation: number } | null = null;
  private checkedAt = 0;
  private checking: Promise<void> | null = null;

  constructor(
    private readonly store: Store,
    private readonly box: SecretBox,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Adopts the newest generation, creating the first one when there is none (keys of older versions included). */
  async load(): Promise<void> {
    const newest = await this.newest();
    await this.use(newest ?? (await this.createGeneration(1)));
  }

  /** Makes a new generation the signer; the previous one stays published for verification. Returns its kid. */
  async rotate(): Promise<string> {
    const previous = await this.newest();
    const next = await this.createGeneration((previous?.generation ?? 0) + 1);
    if (previous && previous.id !== next.id)
      await this.store.collection(signingKeys).update(previous.id, { status: 'active' }, { status: 'retired' });
    await this.use(next);
    return next.id;
  }

  /** The public keys of the newest generations, from the store (with keys made before generations existed). */
  async getJwks(): Promise<{ keys: JWK[] }> {
    // Descending by generation: keys without one (made by an older version) come last.
    const published = await this.store.collection(signingKeys).find({}, { order: 'desc', limit: PUBLISHED });
    return { keys: published.items.map((k) => JSON.parse(k.publicJwk) as JWK) };
  }

  /** The kid this replica signs with now. */
  get kid(): string | undefined {
    return this.active?.kid;
  }

  /**
   * Signs with the newest generation, looking for a newer one first every RECHECK_MS. Called inside a transaction's
   * callback, pass its session (`within`): that look reads through it, as a store-level read there would not join the
   * transaction (kit tx-flow.ts).
   */
  async sign(
    claims: Record<string, unknown>,
    options: { issuer: string; audience: string; ttlSeconds: number; jti: string },
    within?: StoreSession,
  ): Promise<string> {
    if (!this.active) throw new Error('signing keys not loaded');
    if (this.now() - this.checkedAt >= RECHECK_MS) await this.recheck(within ?? this.store);
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

  /** Follows another replica's rotation; a failed look keeps the current key (still published) and tries later. */
  private recheck(reader: StoreSession): Promise<void> {
    this.checking ??= this.newest(reader)
      .then(async (newest) => {
        if (newest && newest.generation! > this.active!.generation) await this.use(newest);
        else this.checkedAt = this.now();
      })
      .catch(() => undefined)
      .finally(() => (this.checking = null));
    return this.checking;
  }

  /** The key of the highest generation, or null when none has one yet. */
  private async newest(reader: StoreSession = this.store): Promise<SigningKeyDoc | null> {
    const page = await reader.collection(signingKeys).find({}, { order: 'desc', limit: 1 });
    const doc = page.items[0];
    return doc && typeof doc.generation === 'number' ? doc : null;
  }

  /** Inserts a key of `generation`, or returns the one another replica inserted first. */
  private async createGeneration(generation: number): Promise<SigningKeyDoc> {
    const { privateKey, publicKey } = await generateKeyPair(JWT_ALG, { extractable: true });
    const kid = newId('key');
    const doc: SigningKeyDoc = {
      id: kid,
      generation,
      privateJwk: this.box.encrypt(JSON.stringify(await exportJWK(privateKey))),
      publicJwk: JSON.stringify({ ...(await exportJWK(publicKey)), kid, alg: JWT_ALG, use: 'sig' }),
      status: 'active',
      createdAt: nowIso(),
    };
    const col = this.store.collection(signingKeys);
    try {
      return await col.insert(doc);
    } catch (err) {
      if (!(err instanceof DuplicateKeyError)) throw err;
      const winner = await col.findOne({ generation });
      if (!winner) throw err;
      return winner;
    }
  }

  private async use(doc: SigningKeyDoc): Promise<void> {
    const key = (await importJWK(JSON.parse(this.box.decrypt(doc.privateJwk)) as JWK, JWT_ALG)) as KeyLike;
    this.active = { kid: doc.id, key, generation: doc.generation ?? 0 };
    this.checkedAt = this.now();
  }
}
