import { recordFeedEntry, type StoreSession } from '@svc/kit';
import { revocations, type RevocationDoc } from './collections';

/** Records a revocation (or a tenant change) in the feed the gateways follow (kit feed). */
export function recordRevocation(tx: StoreSession, kind: RevocationDoc['kind'], subjectId: string): Promise<RevocationDoc> {
  return recordFeedEntry(tx, revocations, kind, subjectId);
}
