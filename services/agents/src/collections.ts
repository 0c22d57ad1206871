import type { CollectionDef } from '@svc/kit';

export const AUTONOMY_LEVELS = ['manual', 'supervised', 'autonomous'] as const;
export type AutonomyLevel = (typeof AUTONOMY_LEVELS)[number];

export interface AgentConfigDoc {
  autonomyLevel: AutonomyLevel;
  /** Model calls a run may make; the last one is offered no tools, so the run ends with an answer. */
  maxSteps: number;
  /** Wall-clock seconds a run may spend running (time waiting for approval does not count). */
  timeBudgetSeconds: number;
  /** Overrides the tenant's model; null: the tenant's (or platform's) model. */
  model: string | null;
  temperature: number | null;
}

export interface AgentDoc {
  id: string;
  tenantId: string;
  name: string;
  systemPrompt: string;
  config: AgentConfigDoc;
  createdAt: string;
  updatedAt: string;
}

/** Listed per tenant, newest first: the index serves every page at the same cost. */
export const agents: CollectionDef<AgentDoc> = { name: 'agents', indexes: [{ fields: ['tenantId'] }] };
