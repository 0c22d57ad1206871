import type { CollectionDef } from '@svc/kit';

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
