import { type CollectionDef, errors, type Store, TenantCap } from '@svc/kit';

export interface WebhookDoc {
  id: string;
  tenantId: string;
  url: string;
  events: string[];
  /** The caller's secret, sealed with the runtime's SecretBox; never returned. */
  secretSealed: string;
  /**
   * Set as a Standard Webhooks secret (`whsec_<base64>`): the HMAC is keyed with the decoded bytes. Absent or false:
   * with the secret's UTF-8 bytes (every secret set before Standard Webhooks keying, whatever its form).
   */
  secretWhsec?: boolean;
  /** The secret a rotation replaced, sealed too, signing beside the current one until `until`; null or absent: none. */
  previousSecret?: PreviousSecret | null;
  active: boolean;
  /** Why the service disabled it; null when active or disabled by the user. */
  disabledReason: string | null;
  /** First failed attempt since the last success (null while healthy): the disable rule reads it. */
  failingSince: string | null;
  createdAt: string;
  updatedAt: string;
}

export interface PreviousSecret {
  sealed: string;
  whsec: boolean;
  /** The end of the grace period (ISO 8601, the rotating replica's clock). */
  until: string;
}

export interface AttemptDoc {
  number: number;
  at: string;
  statusCode: number;
  latencyMs: number;
  error: string;
  responseExcerpt: string;
}

export type DeliveryStatus = 'pending' | 'succeeded' | 'failed';

export interface DeliveryDoc {
  id: string;
  tenantId: string;
  webhookId: string;
  eventId: string;
  eventType: string;
  /** The exact JSON body sent on every attempt (the signature covers it). */
  body: string;
  status: DeliveryStatus;
  attempts: AttemptDoc[];
  /** Attempts made under the retry schedule (manual re-sends are not counted). */
  scheduled: number;
  /** A test event or a manual re-send: one attempt, sent even to a disabled registration, never disables it. */
  manual: boolean;
  firstAttemptAt: string | null;
  nextAttemptAt: string | null;
  createdAt: string;
  updatedAt: string;
}

/** One public event as the service received it from the bus: the event log of GET /events and of recovery. */
export interface EventDoc {
  /** The event id: the `webhook-id` of its deliveries. */
  id: string;
  tenantId: string;
  type: string;
  /** When it happened (its producer's clock): the order of GET /events and the field its filters and retention read. */
  createdAt: string;
  /** The exact JSON body its deliveries send, `{id, type, createdAt, tenantId, data}`. */
  body: string;
}

/** Work waiting for the delivery loop; one entry per pending delivery, same id. */
export interface QueueDoc {
  id: string;
  webhookId: string;
  /**
   * When the next attempt is due, in epoch microseconds (strictly increasing per process, so deliveries created in
   * the same millisecond keep their order). Pushed forward while an attempt is claimed.
   */
  dueUs: number;
  /** An attempt is under way. */
  claimed: boolean;
  /**
   * The fence: bumped by every claim, take-over and release. The claimer's commits (its outcome, a reschedule, a
   * release) are compare-and-sets on it, so a process whose claim was taken over records nothing. Absent on entries
   * not yet claimed since it existed.
   */
  claimGen?: number;
  /**
   * The claimer's heartbeat, bumped before each attempt of a long batch. Another process takes a claim over only
   * after seeing the same (claimGen, claimBeat) for the claim's length on its own clock (kit LeaseWatch).
   */
  claimBeat?: number;
  /** The claiming process (kit newHolderId): a claim of a process gone from this host is released at start-up. */
  claimOwner?: string;
  createdAt: string;
}

export const webhooks: CollectionDef<WebhookDoc> = {
  name: 'webhooks',
  indexes: [{ fields: ['tenantId'] }, { fields: ['tenantId', 'active'] }],
};

/** WEBHOOKS_PER_TENANT, exact across replicas: every insert and delete of a registration goes through it (kit caps). */
export function webhookCap(store: Store, limit: number): TenantCap {
  return new TenantCap(store, {
    kind: 'webhook',
    plural: 'webhooks',
    limit,
    count: (tx, tenantId) => tx.collection(webhooks).count({ tenantId }),
    // The answer this API has always given past the cap.
    refuse: () => errors.badRequest('too_many_webhooks', `A tenant can have at most ${limit} webhooks`, { limit }),
  });
}

/** The unique (webhookId, eventId) index makes fan-out idempotent: a redelivered bus message adds nothing. */
export const deliveries: CollectionDef<DeliveryDoc> = {
  name: 'deliveries',
  indexes: [{ fields: ['webhookId', 'eventId'], unique: true }, { fields: ['webhookId'] }],
};

/**
 * The event log, kept EVENTS_RETENTION_DAYS. Lists read a tenant's events newest first (of one type, or all), in a
 * window of `createdAt`; the sort-only index serves the retention sweep (oldest first, every tenant).
 */
export const events: CollectionDef<EventDoc> = {
  name: 'events',
  indexes: [{ fields: ['tenantId'] }, { fields: ['tenantId', 'type'] }, { fields: [] }],
};

/**
 * Each event's place in its tenant's commit order: `seq` comes from the tenant's head document, moved in the
 * transaction that appends the event (kit advanceHead), so a reader that has seen a `seq` has seen every lower one.
 * What the live stream (GET /events/stream) reads and resumes by; the id is the event's.
 */
export interface EventOrderDoc {
  id: string;
  tenantId: string;
  seq: number;
}

export const eventOrder: CollectionDef<EventOrderDoc> = {
  name: 'event_order',
  sortField: 'seq',
  indexes: [{ fields: ['tenantId'] }],
};

/** Ordered by due time: the loop reads the head; per registration for its in-order drain and for deletes. */
export const queue: CollectionDef<QueueDoc> = {
  name: 'delivery_queue',
  sortField: 'dueUs',
  indexes: [{ fields: [] }, { fields: ['webhookId'] }],
};
