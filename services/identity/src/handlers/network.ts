import { auditChange } from '../audit/log';
import { BlockList, isIP } from 'node:net';
import { type CallContext, errors, nowIso } from '@svc/kit';
import type { identityV1 } from '@svc/proto';
import { tenants } from '../collections';
import type { IdentityDeps } from '../context';
import { recordRevocation } from '../revocations';
import { requireManager } from './team';

const MAX_ENTRIES = 100;

/** An IP (v4/v6) or CIDR, normalised; null when it is neither. */
export function parseAllowlistEntry(entry: string): string | null {
  const [addr, prefix, ...rest] = entry.trim().split('/');
  const family = isIP(addr);
  if (!family || rest.length) return null;
  if (prefix === undefined) return addr;
  if (!/^\d{1,3}$/.test(prefix) || Number(prefix) > (family === 4 ? 32 : 128)) return null;
  try {
    new BlockList().addSubnet(addr, Number(prefix), family === 4 ? 'ipv4' : 'ipv6');
  } catch {
    return null;
  }
  return `${addr}/${Number(prefix)}`;
}

export function networkHandlers(deps: IdentityDeps) {
  const col = deps.store.collection(tenants);
  return {
    async getNetworkAllowlist(
      _req: identityV1.GetNetworkAllowlistRequest,
      ctx: CallContext,
    ): Promise<identityV1.GetNetworkAllowlistResponse> {
      const auth = requireManager(ctx);
      const tenant = await col.get(auth.tid);
      if (!tenant) throw errors.notFound('tenant', auth.tid);
      return { ipAllowlist: tenant.ipAllowlist };
    },

    async setNetworkAllowlist(
      req: identityV1.SetNetworkAllowlistRequest,
      ctx: CallContext,
    ): Promise<identityV1.SetNetworkAllowlistResponse> {
      const auth = requireManager(ctx);
      if (req.ipAllowlist.length > MAX_ENTRIES)
        throw errors.validation([{ field: 'ipAllowlist', message: `at most ${MAX_ENTRIES} entries` }]);
      const fields = [];
      const list: string[] = [];
      for (const [i, entry] of req.ipAllowlist.entries()) {
        const parsed = parseAllowlistEntry(entry);
        if (!parsed) fields.push({ field: `ipAllowlist[${i}]`, message: 'must be an IPv4 or IPv6 address or CIDR range' });
        else if (!list.includes(parsed)) list.push(parsed);
      }
      if (fields.length) throw errors.validation(fields);
      const updated = await deps.store.transaction(async (tx) => {
        const before = await tx.collection(tenants).get(auth.tid);
        const doc = await tx.collection(tenants).update(auth.tid, {}, { ipAllowlist: list, updatedAt: nowIso() });
        if (doc) {
          await recordRevocation(tx, 'tenant', auth.tid);
          await auditChange(
            tx,
            ctx,
            auth.tid,
            'network.allowlist_changed',
            { type: 'tenant', id: auth.tid },
            {
              before: { ipAllowlist: before?.ipAllowlist ?? [] },
              after: { ipAllowlist: list },
            },
          );
        }
        return doc;
      });
      if (!updated) throw errors.notFound('tenant', auth.tid);
      deps.audit.kick();
      deps.announceRevocation();
      return { ipAllowlist: updated.ipAllowlist };
    },
  };
}
