/**
 * Invitations by email (CONTRACT.md 13): an owner or admin invites an address with a role; the email (committed with
 * the invitation, sent by the mail outbox) carries a one-time link whose token only the invitee ever sees (its
 * SHA-256 is stored). Accepting creates the user with that role and signs them in, once: a compare-and-set on the
 * invitation's status makes a second use, a revoked or an expired one 410 `invitation_not_valid`.
 */
import { type CallContext, DuplicateKeyError, errors, newId, nowIso, sha256Hex } from '@svc/kit';
import { ROLES } from '@svc/contracts';
import type { identityV1 } from '@svc/proto';
import { invitations, tenants, users, type InvitationDoc } from '../collections';
import { identityCaps } from '../caps';
import type { IdentityDeps } from '../context';
import { queueEmail } from '../mail/outbox';
import { invitationEmail } from '../mail/messages';
import { expiresIn, hasExpired, newLinkToken } from '../one-time-links';
import { hashPassword } from '../passwords';
import { startSession } from '../tokens';
import { Checks } from '../validate';
import { auditChange, recordAudit } from '../audit/log';
import { newUser, signedIn, userCreated } from './auth';
import { requireManager } from './team';
import { toInvitation, toTenant, toUser } from '../views';

const notValid = () => errors.gone('invitation_not_valid', 'This invitation was used, revoked or has expired');

export function invitationHandlers(deps: IdentityDeps) {
  const { store } = deps;
  const cap = identityCaps(store, deps.settings).members;
  const a = deps.settings.accounts;

  return {
    async createInvitation(req: identityV1.CreateInvitationRequest, ctx: CallContext): Promise<identityV1.CreateInvitationResponse> {
      const auth = requireManager(ctx);
      const c = new Checks();
      const email = c.email('email', req.email);
      const role = c.oneOf('role', req.role, ROLES);
      c.done();
      if (role === 'owner' && auth.role !== 'owner')
        throw errors.forbidden('Only an owner can change owners', { reason: 'owner_required' });
      if (await store.collection(users).findOne({ email })) throw errors.conflict('Email is already registered', { field: 'email' });
      const tenant = await store.collection(tenants).get(auth.tid);
      if (!tenant) throw errors.notFound('tenant', auth.tid);
      const { token, hash } = newLinkToken();
      const now = nowIso();
      const doc: InvitationDoc = {
        id: newId('inv'),
        tenantId: auth.tid,
        email,
        role,
        tokenHash: hash,
        invitedBy: auth.sub,
        status: 'pending',
        expiresAt: expiresIn(a.invitationTtlMs),
        createdAt: now,
        updatedAt: now,
      };
      await cap.transaction(auth.tid, async (tx, places) => {
        await places.take();
        await tx.collection(invitations).insert(doc);
        const mail = invitationEmail({ to: email, tenantName: tenant.name, role, token, publicUrl: a.publicUrl, expiresAt: doc.expiresAt });
        await queueEmail(tx, mail, a.emailDomain);
        await auditChange(tx, ctx, auth.tid, 'invitation.created', { type: 'invitation', id: doc.id }, { after: { email, role } });
      });
      deps.mail.notify();
      deps.audit.kick();
      return { invitation: toInvitation(doc) };
    },

    async listInvitations(req: identityV1.ListInvitationsRequest, ctx: CallContext): Promise<identityV1.ListInvitationsResponse> {
      const auth = requireManager(ctx);
      const page = await store.collection(invitations).find({ tenantId: auth.tid }, { limit: req.limit || 20, cursor: req.cursor || null });
      return { invitations: page.items.map(toInvitation), nextCursor: page.nextCursor ?? '' };
    },

    async revokeInvitation(req: identityV1.RevokeInvitationRequest, ctx: CallContext): Promise<identityV1.RevokeInvitationResponse> {
      const auth = requireManager(ctx);
      const col = store.collection(invitations);
      const doc = await col.get(req.id, { tenantId: auth.tid });
      if (!doc) throw errors.notFound('invitation', req.id);
      if (doc.status === 'accepted') throw errors.conflict('This invitation was already accepted', { reason: 'invitation_accepted' });
      if (doc.status === 'revoked') return { invitation: toInvitation(doc) };
      const revoked = await cap.transaction(auth.tid, async (tx, places) => {
        const done = await tx
          .collection(invitations)
          .update(doc.id, { tenantId: auth.tid, status: 'pending' }, { status: 'revoked', updatedAt: nowIso() });
        if (!done) throw errors.conflict('The invitation changed meanwhile; retry');
        await places.free();
        await auditChange(
          tx,
          ctx,
          auth.tid,
          'invitation.revoked',
          { type: 'invitation', id: doc.id },
          { before: { email: doc.email, role: doc.role } },
        );
        return done;
      });
      deps.audit.kick();
      return { invitation: toInvitation(revoked) };
    },

    async acceptInvitation(req: identityV1.AcceptInvitationRequest, ctx: CallContext): Promise<identityV1.AcceptInvitationResponse> {
      const c = new Checks();
      const name = c.text('name', req.name, 1, 200);
      const password = c.password('password', req.password);
      c.done();
      const invitation = await pendingInvitation(deps, req.token);
      return joinWithInvitation(deps, ctx, invitation, { name, passwordHash: await hashPassword(password), method: 'invitation' });
    },
  };
}

/** The pending invitation of a link's token; a used, revoked, expired or unknown one is 410 `invitation_not_valid`. */
export async function pendingInvitation(deps: IdentityDeps, token: string): Promise<InvitationDoc> {
  const invitation = token ? await deps.store.collection(invitations).findOne({ tokenHash: sha256Hex(token) }) : null;
  if (!invitation || invitation.status !== 'pending' || hasExpired(invitation.expiresAt)) throw notValid();
  return invitation;
}

/**
 * Accepts the invitation, once (a compare-and-set on its status): its invitee becomes a user of its tenant with its
 * role and is signed in. `method` is how they proved the address: the emailed link itself (`invitation`, a password
 * set) or the OpenID provider's verified email (`external`, no password).
 */
export async function joinWithInvitation(
  deps: IdentityDeps,
  ctx: CallContext,
  invitation: InvitationDoc,
  f: { name: string; passwordHash: string; method: 'invitation' | 'external' },
): Promise<identityV1.AcceptInvitationResponse> {
  const { store } = deps;
  const tenant = await store.collection(tenants).get(invitation.tenantId);
  if (!tenant) throw notValid();
  const user = newUser({
    tenantId: invitation.tenantId,
    email: invitation.email,
    name: f.name,
    role: invitation.role,
    passwordHash: f.passwordHash,
    // The link came to this address (or the provider vouches for it): it is verified.
    emailVerified: true,
  });
  let started;
  try {
    // The invitation's place under the members cap becomes the member's: nothing to take.
    started = await store.transaction(async (tx) => {
      const taken = await tx
        .collection(invitations)
        .update(invitation.id, { status: 'pending' }, { status: 'accepted', updatedAt: nowIso() });
      if (!taken) throw notValid();
      await tx.collection(users).insert(user);
      await userCreated(tx, user);
      const actor = { type: 'user' as const, id: user.id, email: user.email };
      await recordAudit(
        tx,
        ctx,
        {
          tenantId: user.tenantId,
          action: 'invitation.accepted',
          target: { type: 'invitation', id: invitation.id },
          changes: { after: { userId: user.id, role: user.role } },
        },
        actor,
      );
      const session = await startSession(deps, tx, user);
      await signedIn(tx, ctx, user, session.session.id, f.method);
      return session;
    });
  } catch (err) {
    if (err instanceof DuplicateKeyError) throw errors.conflict('Email is already registered', { field: 'email' });
    throw err;
  }
  deps.relay.notify();
  deps.audit.kick();
  return { user: toUser(user), tenant: toTenant(tenant), role: user.role, tokens: started.tokens };
}
