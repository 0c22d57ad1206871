import { deadLetterTopic } from '@svc/kit/events/kafka-topics';

/** Bus topics: one per publishing service, keyed by tenant id. */
export const TOPICS = {
  identity: 'svc.identity.events',
  projects: 'svc.projects.events',
  agents: 'svc.agents.events',
  chat: 'svc.chat.events',
  billing: 'svc.billing.events',
  webhooks: 'svc.webhooks.events',
} as const;

/** Every topic the services publish to or consume from, dead letters included (`npm run kafka:topics` creates them). */
export const SERVICE_TOPICS: readonly string[] = Object.values(TOPICS).flatMap((t) => [t, deadLetterTopic(t)]);

/**
 * Event types a webhook can subscribe to (spec part 6, CONTRACT.md 10): generated from the `public_event` options of
 * the messages in proto/events/v1/events.proto, with the JSON Schema of each type's data (EVENT_TYPES).
 */
export { EVENT_TYPES, PUBLIC_EVENT_TYPES, type EventTypeSpec, type PublicEventType } from '@svc/proto';
