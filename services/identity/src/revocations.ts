import { newId, nowIso, type StoreSession } from '@svc/kit';
import { revocations, type RevocationDoc } from './collections';

let counter = 0;

/**
 * Records a revocation in the feed the gateways read. `seq` is time-ordered (microsecond-ish) so a gateway
 * can ask for everything after the last one it saw; it re-reads a few seconds back to cover clock skew
 * between identity replicas and dedupes by id.
 */
export async function recordRevocation(tx: StoreSession, kind: RevocationDoc['kind'], subjectId: string): Promise<RevocationDoc> {
  const at = Date.now();
  counter = (counter + 1) % 1000;
  const doc: RevocationDoc = { id: newId('rev'), seq: at * 1000 + counter, kind, subjectId, at, createdAt: nowIso() };
  await tx.collection(revocations).insert(doc);
  return doc;
}
