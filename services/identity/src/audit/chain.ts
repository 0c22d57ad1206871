import { createHash } from 'node:crypto';

/**
 * Canonical JSON of the audit chain: object keys sorted (by UTF-16 code units, as Array.prototype.sort does), no
 * whitespace, `undefined` members left out, strings and numbers as JSON.stringify writes them. Arrays keep their
 * order. Anyone can recompute an entry's hash from the HTTP answer with this rule.
 */
export function canonicalJson(value: unknown): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'string':
    case 'boolean':
      return JSON.stringify(value);
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('canonical JSON has no non-finite numbers');
      return JSON.stringify(value);
    case 'object': {
      if (Array.isArray(value)) return `[${value.map((v) => (v === undefined ? 'null' : canonicalJson(v))).join(',')}]`;
      const obj = value as Record<string, unknown>;
      const keys = Object.keys(obj)
        .filter((k) => obj[k] !== undefined)
        .sort();
      return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(obj[k])}`).join(',')}}`;
    }
    default:
      throw new TypeError(`canonical JSON cannot hold a ${typeof value}`);
  }
}

export type ActorType = 'user' | 'api_key' | 'admin' | 'system';

export interface AuditActor {
  type: ActorType;
  id: string;
  email?: string;
  keyPrefix?: string;
}

export interface AuditTarget {
  type: string;
  id: string;
}

export interface AuditChanges {
  before: unknown;
  after: unknown;
}

/** An entry as the HTTP API shows it. */
export interface AuditEntryView {
  id: string;
  at: string;
  actor: AuditActor;
  action: string;
  target: AuditTarget;
  ip: string | null;
  userAgent: string | null;
  requestId: string | null;
  changes: AuditChanges;
  prevHash: string | null;
  hash: string;
}

/** SHA-256 (hex) of the entry's canonical JSON without `hash`. */
export function entryHash(entry: Omit<AuditEntryView, 'hash'> & { hash?: string }): string {
  const rest: Record<string, unknown> = { ...entry };
  delete rest.hash;
  return createHash('sha256').update(canonicalJson(rest)).digest('hex');
}

/** The fields of an entry that its hash covers, as the API shows them (a stored document has more). */
export function viewOf(doc: AuditEntryView): AuditEntryView {
  const actor: AuditActor = { type: doc.actor.type, id: doc.actor.id };
  if (doc.actor.email !== undefined) actor.email = doc.actor.email;
  if (doc.actor.keyPrefix !== undefined) actor.keyPrefix = doc.actor.keyPrefix;
  return {
    id: doc.id,
    at: doc.at,
    actor,
    action: doc.action,
    target: { type: doc.target.type, id: doc.target.id },
    ip: doc.ip,
    userAgent: doc.userAgent,
    requestId: doc.requestId,
    changes: doc.changes,
    prevHash: doc.prevHash,
    hash: doc.hash,
  };
}

export interface VerifyResult {
  valid: boolean;
  entries: number;
  firstBrokenId: string | null;
}

/**
 * Checks a run of entries in chain order. The first entry's `prevHash` is taken as given (it is null for a chain
 * whose start is kept; after retention dropped older entries it names the hash of the last dropped one). Each entry
 * must hash to its `hash`, and each next entry's `prevHash` must be that hash. `headHash`, when given, is what the
 * chain's head recorded last: an entry removed from the end shows there.
 */
export class ChainVerifier {
  private prev: string | null | undefined = undefined;
  private count = 0;
  private broken: string | null = null;

  add(entry: AuditEntryView): void {
    this.count++;
    if (this.broken) return;
    const linked = this.prev === undefined || entry.prevHash === this.prev;
    if (!linked || entryHash(viewOf(entry)) !== entry.hash) this.broken = entry.id;
    this.prev = entry.hash;
  }

  result(headHash?: string | null, lastId?: string | null): VerifyResult {
    if (!this.broken && headHash !== undefined && (this.prev ?? null) !== headHash) this.broken = lastId ?? 'head';
    return { valid: this.broken === null, entries: this.count, firstBrokenId: this.broken };
  }
}

/** Field names whose values are never shown in `changes` (secret values, keys, passwords, tokens). */
const SECRET_FIELD =
  /^(value|key|secret|password|passwd|token|hash|credential|credentials|api_?key|private_?key|client_?secret)$|(Secret|Password|Token|Sealed|Hash|ApiKey|Key|Credential)$|_(secret|password|token|key|hash)$/i;

/** Replaces every value under a secret-looking field name with "[redacted]", at any depth. */
export function redact(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redact);
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
      if (v === undefined) continue;
      out[k] = SECRET_FIELD.test(k) && v !== null && typeof v !== 'boolean' ? '[redacted]' : redact(v);
    }
    return out;
  }
  return value;
}
