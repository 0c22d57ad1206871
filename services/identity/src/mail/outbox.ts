/**
 * The email outbox: an email is a document committed in the same transaction as the change that sends it (an
 * invitation, a reset, a sign-up), so none is sent for a change that rolled back and none is lost for one that
 * committed. `EmailSender` (sender.ts) sends and then deletes it. Its Message-ID is fixed here, once: every retry of
 * the same email carries it, so a receiver can drop a copy sent again after a crash.
 */
import { type CollectionDef, newId, nowIso, type StoreSession } from '@svc/kit';

export interface EmailDoc {
  id: string;
  /** RFC 5322 Message-ID, `<id@domain>`: the same on every attempt. */
  messageId: string;
  to: string;
  subject: string;
  text: string;
  createdAt: string;
  /** The process sending it now (kit newHolderId), or null. */
  claimOwner: string | null;
  /** Bumped by every claim: the fence of the claim's later writes. */
  claimGen: number;
  /** Bumped while the claim's holder works: other processes judge it on their own clocks (kit LeaseWatch). */
  claimBeat: number;
  attempts: number;
  /** Not tried again before this time (epoch ms, the clock of the process that failed it: a delay, never a guarantee). */
  retryAtMs: number;
}

export const emailOutbox: CollectionDef<EmailDoc> = { name: 'email_outbox', indexes: [{ fields: [] }] };

export interface Email {
  to: string;
  subject: string;
  text: string;
}

/** Records an email for sending, in the caller's transaction; `domain` names the Message-ID's right-hand side. */
export async function queueEmail(tx: StoreSession, email: Email, domain: string): Promise<EmailDoc> {
  const id = newId('eml');
  const doc: EmailDoc = {
    id,
    messageId: `<${id}@${domain}>`,
    ...email,
    createdAt: nowIso(),
    claimOwner: null,
    claimGen: 0,
    claimBeat: 0,
    attempts: 0,
    retryAtMs: 0,
  };
  await tx.collection(emailOutbox).insert(doc);
  return doc;
}
