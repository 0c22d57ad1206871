import { type CollectionDef, feedCollection, type FeedEntryDoc, type Store, TenantCap } from '@svc/kit';

export interface ProjectDoc {
  id: string;
  tenantId: string;
  name: string;
  description: string;
  language: string;
  createdAt: string;
  updatedAt: string;
}

/** Listed per tenant, newest first: the index serves every page at the same cost. */
export const projects: CollectionDef<ProjectDoc> = { name: 'projects', indexes: [{ fields: ['tenantId'] }] };

/** Changes to projects, for the gateways' project cache (kit feed); subject `<tenant id>/<project id>`. */
export interface ProjectChangeDoc extends FeedEntryDoc {
  kind: 'project_changed' | 'project_deleted';
}
export const projectChanges = feedCollection<ProjectChangeDoc>('project_changes');

/** PROJECTS_PER_TENANT, exact across replicas: every insert and delete of a project goes through it (kit caps). */
export function projectCap(store: Store, limit: number): TenantCap {
  return new TenantCap(store, {
    kind: 'project',
    plural: 'projects',
    limit,
    count: (tx, tenantId) => tx.collection(projects).count({ tenantId }),
  });
}
