import { readFileSync } from 'node:fs';
import Database from 'better-sqlite3';
import { importJWK, SignJWT, type JWTPayload } from 'jose';
import { loadSecretBox } from '@svc/kit';

/**
 * Identity's real active signing key, read from a stack's data directory (the SQLite file and the master key it
 * generated there). Lets a test mint tokens that carry a valid signature but a wrong claim (expired, wrong iss or
 * aud), which nothing in the API would ever issue.
 */
export async function realSigningKey(dataDir: string) {
  const db = new Database(`${dataDir}/identity.db`, { readonly: true, fileMustExist: true });
  try {
    const row = db.prepare(`SELECT doc FROM signing_keys WHERE json_extract(doc,'$.status') = 'active'`).get() as
      { doc: string } | undefined;
    if (!row) throw new Error('no active signing key');
    const doc = JSON.parse(row.doc) as { id: string; privateJwk: string };
    const box = loadSecretBox(undefined, dataDir, false);
    const key = await importJWK(JSON.parse(box.decrypt(doc.privateJwk)), 'ES256');
    return {
      kid: doc.id,
      /** Signs `claims` as identity would (ES256, its kid); every standard claim can be overridden. */
      sign: (claims: JWTPayload, header: { kid?: string } = {}) =>
        new SignJWT(claims).setProtectedHeader({ alg: 'ES256', typ: 'JWT', kid: header.kid ?? doc.id }).sign(key),
    };
  } finally {
    db.close();
  }
}

/** Every file under a directory, concatenated (for "the secret is not stored anywhere" checks). */
export function readAll(paths: string[]): Buffer {
  return Buffer.concat(paths.map((p) => readFileSync(p)));
}
