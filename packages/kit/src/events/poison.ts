/**
 * A handler error means one of two things, and the bus treats them apart (docs/delivery-guarantees.md, "Poison
 * messages"): the message itself is bad (it cannot be decoded or validated: retrying cannot help), or something
 * the handler needs is unavailable (its store, a peer, a timeout: retrying will help once it is back). Only the
 * first kind may be dead-lettered; a handler says so by throwing a PoisonMessageError. Anything else is retried
 * without limit while its partition waits, because dead-lettering a good message loses it (unbilled usage, a lost
 * webhook, a lost plan change).
 */
export class PoisonMessageError extends Error {
  /** The mark the bus reads (not `instanceof`: a bundle may carry more than one copy of this class). */
  readonly poison = true;

  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.name = 'PoisonMessageError';
  }
}

/** Whether a handler error says its message can never be handled (PoisonMessageError or anything marked `poison`). */
export function isPoison(err: unknown): boolean {
  return typeof err === 'object' && err !== null && (err as { poison?: unknown }).poison === true;
}
