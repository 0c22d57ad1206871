/**
 * The rules of regional preferences and storage placement (spec 2.5, 4.5; CONTRACT.md 5), as pure functions.
 *
 * 1. Regions named anywhere must be in the catalogue (400, `unknown region`); a region newly chosen must be
 *    available (400).
 * 2. The compliance level must be one of COMPLIANCE_LEVELS (400).
 * 3. A secondary (failover) region must differ from the primary one (400).
 * 4. `dataResidencyRequired: true` needs a `dataResidencyRegion` (400), and then every place the tenant's data is
 *    kept (primary, secondary, an explicit platform storage region) must be in that region's jurisdiction (400,
 *    `details.reason = "residency_conflict"`). A residency region without the requirement is kept but not enforced.
 * 5. A compliance level may limit jurisdictions (gdpr: EU, hipaa: US); every place of the data must be in one
 *    (400, `details.reason = "compliance_conflict"`).
 * 6. Only after the input is valid: a secondary region being set needs the plan that has `secondary_region`
 *    (403 with `details = {feature, requiredPlan}`). Clearing it is always allowed; one kept from before a
 *    downgrade stays stored but is not in effect (routing info shows none).
 */
import { AppError, type FieldError } from '@svc/kit';
import { hasFeature, requiredPlan, type FeatureKey, type Plan } from '@svc/plans';
import type { RegionEntry } from './config';

/** Compliance levels and the jurisdictions where each lets data live (null: anywhere). */
export const COMPLIANCE_LEVELS: Record<string, readonly string[] | null> = {
  standard: null,
  soc2: null,
  iso27001: null,
  pci_dss: null,
  gdpr: ['EU'],
  hipaa: ['US'],
};

export interface Prefs {
  primaryRegion: string;
  secondaryRegion: string | null;
  dataResidencyRequired: boolean;
  dataResidencyRegion: string | null;
  complianceLevel: string;
}

export type PrefsPatch = Partial<Prefs>;

export function defaultPreferences(catalogue: RegionEntry[]): Prefs {
  const primary = catalogue.some((r) => r.id === 'us-east') ? 'us-east' : (catalogue.find((r) => r.available) ?? catalogue[0]).id;
  return {
    primaryRegion: primary,
    secondaryRegion: null,
    dataResidencyRequired: false,
    dataResidencyRegion: null,
    complianceLevel: 'standard',
  };
}

/** A 403 for a feature the plan lacks, naming the feature and the lowest plan that has it. */
export function featureRequired(key: FeatureKey): AppError {
  const plan = requiredPlan(key);
  return new AppError('FORBIDDEN', `This needs the ${plan} plan or above (feature ${key})`, { feature: key, requiredPlan: plan });
}

export function requireFeature(plan: Plan, key: FeatureKey): void {
  if (!hasFeature(plan, key)) throw featureRequired(key);
}

export class Catalogue {
  private readonly byId: Map<string, RegionEntry>;
  constructor(readonly regions: RegionEntry[]) {
    this.byId = new Map(regions.map((r) => [r.id, r]));
  }
  get(id: string): RegionEntry | undefined {
    return this.byId.get(id);
  }
  /** Problems with a region newly chosen for `field`. */
  check(field: string, id: string, out: FieldError[]): void {
    const region = this.byId.get(id);
    if (!region) out.push({ field, message: `unknown region; one of: ${this.regions.map((r) => r.id).join(', ')}` });
    else if (!region.available) out.push({ field, message: `region ${id} is not available` });
  }
}

/**
 * Where the tenant's data would live, checked against residency and compliance (rules 4 and 5). `platformRegion`
 * is an explicit platform storage region (null when storage follows the primary region or is the tenant's own).
 */
export function placementProblems(p: Prefs, platformRegion: string | null, catalogue: Catalogue): AppError | null {
  const places: Array<[string, string]> = [['primaryRegion', p.primaryRegion]];
  if (p.secondaryRegion) places.push(['secondaryRegion', p.secondaryRegion]);
  if (platformRegion) places.push(['platformRegion', platformRegion]);
  const jurisdiction = (id: string) => catalogue.get(id)?.jurisdiction ?? '?';

  if (p.dataResidencyRequired) {
    if (!p.dataResidencyRegion)
      return new AppError('VALIDATION_ERROR', 'Data residency needs a region', {
        fields: [{ field: 'dataResidencyRegion', message: 'is required when dataResidencyRequired is true' }],
      });
    const home = jurisdiction(p.dataResidencyRegion);
    const fields = places
      .filter(([, id]) => jurisdiction(id) !== home)
      .map(([field, id]) => ({
        field,
        message: `${id} is in ${jurisdiction(id)}; data residency in ${p.dataResidencyRegion} keeps data in ${home}`,
      }));
    if (fields.length)
      return new AppError('VALIDATION_ERROR', `Data residency in ${p.dataResidencyRegion} keeps data in ${home}`, {
        reason: 'residency_conflict',
        fields,
      });
  }
  const allowed = COMPLIANCE_LEVELS[p.complianceLevel];
  if (allowed) {
    const fields = places
      .filter(([, id]) => !allowed.includes(jurisdiction(id)))
      .map(([field, id]) => ({
        field,
        message: `${id} is in ${jurisdiction(id)}; ${p.complianceLevel} keeps data in ${allowed.join(', ')}`,
      }));
    if (fields.length)
      return new AppError('VALIDATION_ERROR', `Compliance level ${p.complianceLevel} keeps data in ${allowed.join(', ')}`, {
        reason: 'compliance_conflict',
        fields,
      });
  }
  return null;
}

/**
 * Applies a partial change to the current preferences with every rule above; returns the new preferences or
 * throws (400s first, then the plan's 403). `platformRegion` is the tenant's explicit platform storage region.
 */
export function applyPreferences(
  current: Prefs,
  patch: PrefsPatch,
  plan: Plan,
  platformRegion: string | null,
  catalogue: Catalogue,
): Prefs {
  const fields: FieldError[] = [];
  if (patch.primaryRegion !== undefined) catalogue.check('primaryRegion', patch.primaryRegion, fields);
  if (patch.secondaryRegion) catalogue.check('secondaryRegion', patch.secondaryRegion, fields);
  if (patch.dataResidencyRegion) catalogue.check('dataResidencyRegion', patch.dataResidencyRegion, fields);
  if (patch.complianceLevel !== undefined && !Object.prototype.hasOwnProperty.call(COMPLIANCE_LEVELS, patch.complianceLevel))
    fields.push({ field: 'complianceLevel', message: `must be one of: ${Object.keys(COMPLIANCE_LEVELS).join(', ')}` });
  if (fields.length) throw new AppError('VALIDATION_ERROR', 'Invalid request parameters', { fields });

  const next: Prefs = { ...current };
  for (const key of Object.keys(patch) as Array<keyof Prefs>)
    if (patch[key] !== undefined) (next as unknown as Record<string, unknown>)[key] = patch[key];
  if (next.secondaryRegion && next.secondaryRegion === next.primaryRegion)
    throw new AppError('VALIDATION_ERROR', 'Invalid request parameters', {
      fields: [{ field: 'secondaryRegion', message: 'must differ from primaryRegion' }],
    });
  const conflict = placementProblems(next, platformRegion, catalogue);
  if (conflict) throw conflict;
  if (patch.secondaryRegion) requireFeature(plan, 'secondary_region');
  return next;
}
