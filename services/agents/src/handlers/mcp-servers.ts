/**
 * MCP server registrations (CONTRACT.md 11). Create and refresh connect to the server through the egress guard and
 * list its tools: an address the guard refuses is a 400, a server that cannot be reached is stored with
 * `status: "error"` and its reason. The bearer token is a tenant secret's name, resolved with the caller's
 * credential at each connection; its value is never stored here.
 */
import {
  type AuthedContext,
  type CallContext,
  EgressError,
  type EgressPolicy,
  errors,
  isAppError,
  newId,
  nowIso,
  resolveAndCheck,
  type ServiceClient,
  type Store,
} from '@svc/kit';
import { authed } from '@svc/contracts';
import type { agentsV1, identityV1 } from '@svc/proto';
import { mcpServerCap, mcpServers, type McpServerDoc } from '../collections';
import type { McpConnector } from '../mcp-client';
import { toMcpServer } from '../views';

export interface McpHandlerDeps {
  store: Store;
  identity: ServiceClient<typeof identityV1.IdentityServiceService>;
  connector: McpConnector;
  policy: EgressPolicy;
  /** MCP_CALL_TIMEOUT_S in ms: the whole connect-and-list of a create or refresh. */
  timeoutMs: number;
  maxPerTenant: number;
}

const NAME = [1, 200] as const;
const URL_MAX = 2000;
const SECRET_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;

/** Reads the value of the tenant's secret `name` with the credential given (a user's, or a run's delegated one). */
export async function resolveBearer(
  identity: McpHandlerDeps['identity'],
  name: string,
  call: { token: string; requestId?: string },
): Promise<string> {
  return (await identity.resolveSecret({ name }, call)).value;
}

export function mcpHandlers(deps: McpHandlerDeps) {
  const { store } = deps;
  const col = store.collection(mcpServers);
  const cap = mcpServerCap(store, deps.maxPerTenant);

  async function load(tenantId: string, id: string): Promise<McpServerDoc> {
    const doc = await col.get(id, { tenantId });
    if (!doc) throw errors.notFound('mcp_server', id);
    return doc;
  }

  function checkName(v: string): string {
    const name = v.trim();
    if (name.length < NAME[0] || name.length > NAME[1])
      throw errors.validation([{ field: 'name', message: 'must be 1 to 200 characters' }]);
    return name;
  }

  async function checkUrl(v: string): Promise<string> {
    if (v.length < 1 || v.length > URL_MAX) throw errors.validation([{ field: 'url', message: `must be 1 to ${URL_MAX} characters` }]);
    try {
      await resolveAndCheck(v, deps.policy);
    } catch (err) {
      if (err instanceof EgressError) throw errors.validation([{ field: 'url', message: err.message }]);
      throw err;
    }
    return v;
  }

  function checkSecret(v: string): string {
    if (!SECRET_NAME.test(v)) throw errors.validation([{ field: 'auth.secret', message: 'must be the name of one of your secrets' }]);
    return v;
  }

  /** Connects and lists the tools: the fields a registration's state is made of. */
  async function probe(
    c: AuthedContext,
    url: string,
    authSecret: string | null,
  ): Promise<Pick<McpServerDoc, 'status' | 'error' | 'tools'>> {
    let bearer: string | undefined;
    if (authSecret) {
      try {
        bearer = await resolveBearer(deps.identity, authSecret, { token: c.token, requestId: c.requestId });
      } catch (err) {
        if (isAppError(err) && err.code === 'RESOURCE_NOT_FOUND')
          throw errors.validation([{ field: 'auth.secret', message: `there is no secret named ${authSecret}` }]);
        if (isAppError(err) && (err.code === 'FORBIDDEN' || err.code === 'UNAUTHORIZED'))
          return { status: 'error', error: `secret_unavailable: the credential cannot read the secret ${authSecret}`, tools: [] };
        throw err;
      }
    }
    try {
      const tools = await deps.connector.listTools({ url, bearer }, deps.timeoutMs);
      return { status: 'ready', error: null, tools };
    } catch (err) {
      return { status: 'error', error: (err as Error).message, tools: [] };
    }
  }

  return {
    async createMcpServer(req: agentsV1.CreateMcpServerRequest, ctx: CallContext): Promise<agentsV1.CreateMcpServerResponse> {
      const c = authed(ctx, 'agents:write');
      const name = checkName(req.name);
      const authSecret = req.authSecret ? checkSecret(req.authSecret) : null;
      const url = await checkUrl(req.url);
      await cap.refuseWhenFull(c.auth.tid);
      const state = await probe(c, url, authSecret);
      const now = nowIso();
      const doc: McpServerDoc = { id: newId('mcp'), tenantId: c.auth.tid, name, url, authSecret, ...state, createdAt: now, updatedAt: now };
      await cap.transaction(c.auth.tid, async (tx, places) => {
        await places.take();
        await tx.collection(mcpServers).insert(doc);
      });
      return { server: toMcpServer(doc) };
    },

    async listMcpServers(req: agentsV1.ListMcpServersRequest, ctx: CallContext): Promise<agentsV1.ListMcpServersResponse> {
      const { auth } = authed(ctx, 'agents:read');
      const page = await col.find({ tenantId: auth.tid }, { limit: req.limit || 20, cursor: req.cursor || null });
      return { servers: page.items.map(toMcpServer), nextCursor: page.nextCursor ?? '' };
    },

    async getMcpServer(req: agentsV1.GetMcpServerRequest, ctx: CallContext): Promise<agentsV1.GetMcpServerResponse> {
      const { auth } = authed(ctx, 'agents:read');
      return { server: toMcpServer(await load(auth.tid, req.id)) };
    },

    async updateMcpServer(req: agentsV1.UpdateMcpServerRequest, ctx: CallContext): Promise<agentsV1.UpdateMcpServerResponse> {
      const c = authed(ctx, 'agents:write');
      const current = await load(c.auth.tid, req.id);
      const patch: Partial<McpServerDoc> = { updatedAt: nowIso() };
      if (req.name !== undefined) patch.name = checkName(req.name);
      if (req.url !== undefined) patch.url = await checkUrl(req.url);
      if (req.clearAuth) patch.authSecret = null;
      else if (req.authSecret !== undefined) patch.authSecret = checkSecret(req.authSecret);
      // A new address or token: the tools are listed again from it.
      if (patch.url !== undefined || patch.authSecret !== undefined)
        Object.assign(
          patch,
          await probe(c, patch.url ?? current.url, patch.authSecret === undefined ? current.authSecret : patch.authSecret),
        );
      const updated = await col.update(req.id, { tenantId: c.auth.tid }, patch);
      if (!updated) throw errors.notFound('mcp_server', req.id);
      return { server: toMcpServer(updated) };
    },

    async deleteMcpServer(req: agentsV1.DeleteMcpServerRequest, ctx: CallContext): Promise<agentsV1.DeleteMcpServerResponse> {
      const { auth } = authed(ctx, 'agents:write');
      const deleted = await cap.transaction(auth.tid, async (tx, places) => {
        const ok = await tx.collection(mcpServers).delete(req.id, { tenantId: auth.tid });
        if (ok) await places.free();
        return ok;
      });
      if (!deleted) throw errors.notFound('mcp_server', req.id);
      return { id: req.id };
    },

    async refreshMcpServer(req: agentsV1.RefreshMcpServerRequest, ctx: CallContext): Promise<agentsV1.RefreshMcpServerResponse> {
      const c = authed(ctx, 'agents:write');
      const current = await load(c.auth.tid, req.id);
      const state = await probe(c, current.url, current.authSecret);
      const updated = await col.update(req.id, { tenantId: c.auth.tid }, { ...state, updatedAt: nowIso() });
      if (!updated) throw errors.notFound('mcp_server', req.id);
      return { server: toMcpServer(updated) };
    },
  };
}
