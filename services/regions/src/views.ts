import type { regionsV1 } from '@svc/proto';
import type { StorageDoc } from './collections';
import type { Prefs } from './rules';

export function toPreferences(p: Prefs): regionsV1.Preferences {
  return {
    primaryRegion: p.primaryRegion,
    secondaryRegion: p.secondaryRegion ?? '',
    dataResidencyRequired: p.dataResidencyRequired,
    dataResidencyRegion: p.dataResidencyRegion ?? '',
    complianceLevel: p.complianceLevel,
  };
}

/** The keys never leave: only whether they are set and the access key's last 4 characters. */
export function toStorage(doc: StorageDoc | null, primaryRegion: string): regionsV1.StorageConfig {
  if (!doc || doc.storageMode === 'platform')
    return {
      storageMode: 'platform',
      platformRegion: doc?.platformRegion ?? primaryRegion,
      byosProvider: '',
      byosEndpoint: '',
      byosBucket: '',
      byosRegion: '',
      byosCredentialsSet: false,
      byosAccessKeyLast4: '',
      updatedAt: doc?.updatedAt ?? '',
    };
  return {
    storageMode: 'byos',
    platformRegion: '',
    byosProvider: doc.byosProvider ?? '',
    byosEndpoint: doc.byosEndpoint ?? '',
    byosBucket: doc.byosBucket ?? '',
    byosRegion: doc.byosRegion ?? '',
    byosCredentialsSet: doc.byosAccessKeySealed !== null && doc.byosSecretKeySealed !== null,
    byosAccessKeyLast4: doc.byosAccessKeyLast4 ?? '',
    updatedAt: doc.updatedAt,
  };
}
