import { type CallContext, DuplicateKeyError, errors, nowIso, type StoreSession } from '@svc/kit';
import { ROLES, type Role } from '@svc/contracts';
import type { identityV1 } from '@svc/proto';
import { tenants, users, type UserDoc } from '../collections';
import { identityCaps } from '../caps';
import type { IdentityDeps } from '../context';
import { hashPassword } from '../passwords';
import { recordRevocation } from '../revocations';
import { Checks } from '../validate';
import { newUser, requireAuth, userCreated } from './auth';
import { toMember } from '../views';
import { auditChange } from '../audit/log';

/** Owners and admins manage the team, keys and security settings. The gateway checks this too. */
export function requireManager(ctx: CallContext) {
  requireAuth(ctx);
  if (ctx.auth.role !== 'owner' && ctx.auth.role !== 'admin')
    throw errors.forbidden('This needs the owner or admin role', { reason: 'role_required', requiredRole: 'admin' });
  return ctx.auth;
}

export function teamHandlers(deps: IdentityDeps) {
  const { store } = deps;
  const col = store.collection(users);
  const cap = identityCaps(store, deps.settings).members;

  /** Only an owner may grant or take away ownership, and a tenant always keeps one owner. */
  function checkOwnerRules(actorRole: string, target: UserDoc | null, newRole: Role | null) {
    const touchesOwner = target?.role === 'owner' || newRole === 'owner';
    if (touchesOwner && actorRole !== 'owner') throw errors.forbidden('Only an owner can change owners', { reason: 'owner_required' });
  }

  /**
   * Inside the transaction of a change that takes an owner away: at least one other owner must remain. Two such
   * changes at once (two owners demoting each other) would both count two owners; so each first bumps the tenant's
   * `teamRev` with a compare-and-set, which makes them conflict (one waits on SQLite; MongoDB aborts one), and the
   * count is then taken inside the transaction.
   */
  async function keepAnOwner(tx: StoreSession, tenantId: string, target: UserDoc, newRole: Role | null) {
    if (target.role !== 'owner' || newRole === 'owner') return;
    const tenantsCol = tx.collection(tenants);
    const tenant = await tenantsCol.get(tenantId);
    const rev = tenant?.teamRev ?? null;
    if (!(await tenantsCol.update(tenantId, { teamRev: rev }, { teamRev: (rev ?? 0) + 1 })))
      throw errors.conflict('The team changed meanwhile; retry');
    if ((await tx.collection(users).count({ tenantId, role: 'owner' })) <= 1)
      throw errors.conflict('A tenant must keep at least one owner', { reason: 'last_owner' });
  }

  return {
    async listMembers(req: identityV1.ListMembersRequest, ctx: CallContext): Promise<identityV1.ListMembersResponse> {
      requireAuth(ctx);
      const page = await col.find({ tenantId: ctx.auth.tid }, { limit: req.limit || 20, cursor: req.cursor || null });
      return { members: page.items.map(toMember), nextCursor: page.nextCursor ?? '' };
    },

    async addMember(req: identityV1.AddMemberRequest, ctx: CallContext): Promise<identityV1.AddMemberResponse> {
      const auth = requireManager(ctx);
      const c = new Checks();
      const email = c.email('email', req.email);
      const name = c.text('name', req.name, 1, 200);
      const role = c.oneOf('role', req.role, ROLES);
      const password = c.password('password', req.password);
      c.done();
      checkOwnerRules(auth.role, null, role);
      await cap.refuseWhenFull(auth.tid); // before the password hash
      const user = newUser({ tenantId: auth.tid, email, name, role, passwordHash: await hashPassword(password) });
      try {
        await cap.transaction(auth.tid, async (tx, places) => {
          await places.take();
          await tx.collection(users).insert(user);
          await userCreated(tx, user);
          await auditChange(tx, ctx, auth.tid, 'member.added', { type: 'user', id: user.id }, { after: { email, name, role } });
        });
      } catch (err) {
        if (err instanceof DuplicateKeyError) throw errors.conflict('Email is already registered', { field: 'email' });
        throw err;
      }
      deps.relay.notify();
      deps.audit.kick();
      return { member: toMember(user) };
    },

    async updateMember(req: identityV1.UpdateMemberRequest, ctx: CallContext): Promise<identityV1.UpdateMemberResponse> {
      const auth = requireManager(ctx);
      const c = new Checks();
      const role = c.oneOf('role', req.role, ROLES);
      c.done();
      const target = await col.get(req.userId, { tenantId: auth.tid });
      if (!target) throw errors.notFound('member', req.userId);
      checkOwnerRules(auth.role, target, role);
      const updated = await store.transaction(async (tx) => {
        await keepAnOwner(tx, auth.tid, target, role);
        const doc = await tx.collection(users).update(target.id, { tenantId: auth.tid, role: target.role }, { role, updatedAt: nowIso() });
        if (!doc) throw errors.conflict('Member changed meanwhile; retry');
        // Tokens carry the role: end the member's current sessions so the new role applies at once.
        await recordRevocation(tx, 'user', doc.id);
        await auditChange(
          tx,
          ctx,
          auth.tid,
          'member.role_changed',
          { type: 'user', id: doc.id },
          {
            before: { role: target.role },
            after: { role },
          },
        );
        return doc;
      });
      deps.audit.kick();
      deps.announceRevocation();
      return { member: toMember(updated) };
    },

    async removeMember(req: identityV1.RemoveMemberRequest, ctx: CallContext): Promise<identityV1.RemoveMemberResponse> {
      const auth = requireManager(ctx);
      const target = await col.get(req.userId, { tenantId: auth.tid });
      if (!target) throw errors.notFound('member', req.userId);
      if (target.id === auth.sub) throw errors.conflict('You cannot remove yourself', { reason: 'self_removal' });
      checkOwnerRules(auth.role, target, null);
      await cap.transaction(auth.tid, async (tx, places) => {
        await keepAnOwner(tx, auth.tid, target, null);
        if (await tx.collection(users).delete(target.id, { tenantId: auth.tid })) await places.free();
        await recordRevocation(tx, 'user', target.id);
        await auditChange(
          tx,
          ctx,
          auth.tid,
          'member.removed',
          { type: 'user', id: target.id },
          {
            before: { email: target.email, name: target.name, role: target.role },
          },
        );
      });
      deps.audit.kick();
      deps.announceRevocation();
      return {};
    },
  };
}
