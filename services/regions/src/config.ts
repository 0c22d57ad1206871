import { ConfigError, field } from '@svc/kit';

/** Settings of the regions service beyond the common ones. */
export const regionsConfig = {
  /** The region catalogue as JSON `[{id, name, jurisdiction, available}]`; the five built-in regions when unset. */
  catalogue: field('REGIONS_CATALOGUE', 'string'),
  /**
   * Limit of each provider call of a storage validation (the connect, then one request per check: six at most).
   * At most 10 s, so that a whole validation ends within the gateway's deadline for it (65 s).
   */
  validateTimeoutMs: field('STORAGE_VALIDATE_TIMEOUT_MS', 'int', { default: '5000', min: 100, max: 10_000 }),
} as const;

export interface RegionEntry {
  id: string;
  name: string;
  /** The legal area whose rules apply to data kept there (US, EU, SG, ...). */
  jurisdiction: string;
  available: boolean;
}

export const DEFAULT_CATALOGUE: RegionEntry[] = [
  { id: 'us-east', name: 'US East (Virginia)', jurisdiction: 'US', available: true },
  { id: 'us-west', name: 'US West (Oregon)', jurisdiction: 'US', available: true },
  { id: 'eu-west', name: 'EU West (Ireland)', jurisdiction: 'EU', available: true },
  { id: 'eu-central', name: 'EU Central (Frankfurt)', jurisdiction: 'EU', available: true },
  { id: 'ap-southeast', name: 'Asia Pacific Southeast (Singapore)', jurisdiction: 'SG', available: true },
];

const ID = /^[a-z][a-z0-9-]{1,31}$/;

/** REGIONS_CATALOGUE -> entries, or a ConfigError naming what is wrong (the process stops at start). */
export function parseCatalogue(raw: string | undefined): RegionEntry[] {
  if (raw === undefined) return DEFAULT_CATALOGUE;
  const fail = (why: string) => new ConfigError([`REGIONS_CATALOGUE ${why}`]);
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    throw fail('must be JSON: [{"id", "name", "jurisdiction", "available"}]');
  }
  if (!Array.isArray(parsed) || parsed.length === 0) throw fail('must be a non-empty array');
  const seen = new Set<string>();
  return parsed.map((r: Partial<RegionEntry>, i) => {
    if (typeof r?.id !== 'string' || !ID.test(r.id)) throw fail(`[${i}].id must match ${ID}`);
    if (seen.has(r.id)) throw fail(`[${i}].id ${r.id} appears twice`);
    seen.add(r.id);
    if (typeof r.name !== 'string' || !r.name) throw fail(`[${i}].name must be a non-empty string`);
    if (typeof r.jurisdiction !== 'string' || !r.jurisdiction) throw fail(`[${i}].jurisdiction must be a non-empty string`);
    return { id: r.id, name: r.name, jurisdiction: r.jurisdiction, available: r.available !== false };
  });
}
