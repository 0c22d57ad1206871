import type { CollectionDef } from '@svc/kit';
import type { Plan } from '@svc/plans';

/** The tenant's plan as this service last heard it (tenant.created, tenant.plan_changed); id = tenant id. */
export interface TenantPlanDoc {
  id: string;
  plan: Plan;
  /** The event that set it. */
  eventId: string;
  /** Of the last plan change applied (contracts planChangeIsNewer): billing's version, and its time of the change. */
  version?: number;
  changedAt?: string;
  createdAt: string;
  updatedAt: string;
}

/** Events already applied, by event id: the bus delivers at least once. */
export interface AppliedEventDoc {
  id: string;
  type: string;
  createdAt: string;
}

/** Regional preferences; id = tenant id. `rev` makes every change a compare-and-set (several replicas). */
export interface PreferencesDoc {
  id: string;
  primaryRegion: string;
  secondaryRegion: string | null;
  dataResidencyRequired: boolean;
  dataResidencyRegion: string | null;
  complianceLevel: string;
  rev: number;
  createdAt: string;
  updatedAt: string;
}

/** Storage configuration; id = tenant id. Keys are sealed with the master key (kit SecretBox, with key ids). */
export interface StorageDoc {
  id: string;
  storageMode: 'platform' | 'byos';
  /** Null: follow the primary region. */
  platformRegion: string | null;
  byosProvider: string | null;
  byosEndpoint: string | null;
  byosBucket: string | null;
  byosRegion: string | null;
  byosAccessKeySealed: string | null;
  byosSecretKeySealed: string | null;
  byosAccessKeyLast4: string | null;
  createdAt: string;
  updatedAt: string;
}

export const tenantPlans: CollectionDef<TenantPlanDoc> = { name: 'tenant_plans' };
export const appliedEvents: CollectionDef<AppliedEventDoc> = { name: 'applied_events' };
export const preferences: CollectionDef<PreferencesDoc> = { name: 'preferences' };
export const storageConfigs: CollectionDef<StorageDoc> = { name: 'storage_configs' };

export const ALL_COLLECTIONS = [tenantPlans, appliedEvents, preferences, storageConfigs];
