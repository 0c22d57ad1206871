/** Bus topics: one per publishing service, keyed by tenant id. */
export const TOPICS = {
  identity: 'svc.identity.events',
  projects: 'svc.projects.events',
  agents: 'svc.agents.events',
  chat: 'svc.chat.events',
  billing: 'svc.billing.events',
} as const;

/** Event types a webhook can subscribe to (spec part 6). */
export const PUBLIC_EVENT_TYPES = [
  'project.created',
  'project.updated',
  'project.deleted',
  'agent.started',
  'agent.completed',
  'agent.failed',
  'tenant.created',
  'user.created',
  'billing.threshold_crossed',
  'audit.entry_created',
] as const;
export type PublicEventType = (typeof PUBLIC_EVENT_TYPES)[number];
