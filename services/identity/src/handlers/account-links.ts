/**
 * Password reset and email verification (CONTRACT.md 13), each by a one-time link whose token is stored only as its
 * SHA-256 (`account_tokens`). A link is used once: a compare-and-set on `usedAt`; a used or expired one is 410.
 * Forgot-password answers the same for every address and does the same work (a token made and hashed, a
 * transaction run) whether or not an account has it: only a known address gets an email.
 */
import { type CallContext, errors, nowIso, pages, sha256Hex, type StoreSession } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import { accountTokens, sessions, users, type AccountTokenDoc, type UserDoc } from '../collections';
import type { IdentityDeps } from '../context';
import { queueEmail } from '../mail/outbox';
import { passwordResetEmail, verificationEmail } from '../mail/messages';
import { expiresIn, hasExpired, newLinkToken } from '../one-time-links';
import { hashPassword } from '../passwords';
import { recordRevocation } from '../revocations';
import { Checks } from '../validate';
import { recordAudit } from '../audit/log';
import { toUser } from '../views';

type Purpose = AccountTokenDoc['purpose'];

/** A second reset email within this time of the last unused one is not sent (the link already sent still works). */
const RESET_EMAIL_GAP_MS = 60_000;

/** A one-time token for `user`, stored in the caller's transaction; returns the token for the email. */
async function storeToken(tx: StoreSession, user: UserDoc, purpose: Purpose, ttlMs: number, link = newLinkToken()) {
  const doc: AccountTokenDoc = {
    id: link.hash,
    purpose,
    userId: user.id,
    tenantId: user.tenantId,
    usedAt: null,
    expiresAt: expiresIn(ttlMs),
    createdAt: nowIso(),
  };
  await tx.collection(accountTokens).insert(doc);
  return { token: link.token, expiresAt: doc.expiresAt };
}

/** Queues the verification email of a new account, in its sign-up transaction. */
export async function queueVerification(tx: StoreSession, deps: IdentityDeps, user: UserDoc): Promise<void> {
  const a = deps.settings.accounts;
  const { token, expiresAt } = await storeToken(tx, user, 'email_verification', a.verificationTtlMs);
  await queueEmail(tx, verificationEmail({ to: user.email, token, publicUrl: a.publicUrl, expiresAt }), a.emailDomain);
}

/**
 * Uses a token once, in the caller's transaction: the token's document, or 410 when it is unknown, of another
 * purpose, used or expired.
 */
async function useToken(tx: StoreSession, token: string, purpose: Purpose): Promise<AccountTokenDoc> {
  const gone = () => errors.gone('token_not_valid', 'This link was used or has expired');
  const col = tx.collection(accountTokens);
  const doc = token ? await col.get(sha256Hex(token)) : null;
  if (!doc || doc.purpose !== purpose || doc.usedAt || hasExpired(doc.expiresAt)) throw gone();
  if (!(await col.update(doc.id, { usedAt: null }, { usedAt: nowIso() }))) throw gone();
  return doc;
}

export function accountLinkHandlers(deps: IdentityDeps) {
  const { store } = deps;
  const a = deps.settings.accounts;

  return {
    async forgotPassword(req: identityV1.ForgotPasswordRequest): Promise<identityV1.ForgotPasswordResponse> {
      const email = req.email.trim().toLowerCase();
      const link = newLinkToken();
      const user = email ? await store.collection(users).findOne({ email }) : null;
      const sent = await store.transaction(async (tx) => {
        // The newest link of the account: one reset email a minute at most, however often someone asks. An unknown
        // address makes the same read.
        const newest = (await tx.collection(accountTokens).find({ userId: user?.id ?? '' }, { limit: 1 })).items[0];
        if (!user || user.disabled) return false;
        if (newest?.purpose === 'password_reset' && !newest.usedAt && Date.parse(newest.createdAt) > Date.now() - RESET_EMAIL_GAP_MS)
          return false;
        const { token, expiresAt } = await storeToken(tx, user, 'password_reset', a.passwordResetTtlMs, link);
        await queueEmail(tx, passwordResetEmail({ to: user.email, token, publicUrl: a.publicUrl, expiresAt }), a.emailDomain);
        return true;
      });
      if (sent) deps.mail.notify();
      return {};
    },

    async resetPassword(req: identityV1.ResetPasswordRequest, ctx: CallContext): Promise<identityV1.ResetPasswordResponse> {
      const c = new Checks();
      const password = c.password('password', req.password);
      c.done();
      const passwordHash = await hashPassword(password);
      await store.transaction(async (tx) => {
        const used = await useToken(tx, req.token, 'password_reset');
        const user = await tx.collection(users).get(used.userId, { tenantId: used.tenantId });
        if (!user) throw errors.gone('token_not_valid', 'This link was used or has expired');
        // The link came to the address: it is verified too.
        await tx.collection(users).update(user.id, {}, { passwordHash, emailVerified: true, updatedAt: nowIso() });
        // Every session ends (its refresh tokens with it); the feed tells gateways to refuse its access tokens.
        for await (const page of pages(tx.collection(sessions), { userId: user.id }, { limit: 200 }))
          for (const s of page) if (!s.revokedAt) await tx.collection(sessions).update(s.id, { revokedAt: null }, { revokedAt: nowIso() });
        await recordRevocation(tx, 'user', user.id);
        await recordAudit(
          tx,
          ctx,
          { tenantId: user.tenantId, action: 'password.reset', target: { type: 'user', id: user.id } },
          { type: 'user', id: user.id, email: user.email },
        );
      });
      deps.audit.kick();
      deps.announceRevocation();
      return {};
    },

    async verifyEmail(req: identityV1.VerifyEmailRequest): Promise<identityV1.VerifyEmailResponse> {
      const user = await store.transaction(async (tx) => {
        const used = await useToken(tx, req.token, 'email_verification');
        const doc = await tx
          .collection(users)
          .update(used.userId, { tenantId: used.tenantId }, { emailVerified: true, updatedAt: nowIso() });
        if (!doc) throw errors.gone('token_not_valid', 'This link was used or has expired');
        return doc;
      });
      return { user: toUser(user) };
    },
  };
}
