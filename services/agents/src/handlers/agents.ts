import { type CallContext, errors, newId, nowIso, type Store } from '@svc/kit';
import { authed } from '@svc/contracts';
import type { agentsV1 } from '@svc/proto';
import { checkText, DEFAULT_CONFIG, mergeConfig } from '../agent-config';
import { agentCap, agents, mcpServers, type AgentConfigDoc, type AgentDoc } from '../collections';
import { toAgent } from '../views';

/** The tenant's agent, or NOT_FOUND (also for another tenant's id: existence is not revealed). */
export async function loadAgent(store: Store, tenantId: string, id: string): Promise<AgentDoc> {
  const doc = await store.collection(agents).get(id, { tenantId });
  if (!doc) throw errors.notFound('agent', id);
  return doc;
}

/** Every server an agent's config names must be one of the tenant's (400 otherwise: another tenant's is unknown). */
async function checkServers(store: Store, tenantId: string, config: AgentConfigDoc): Promise<void> {
  const problems: Array<{ field: string; message: string }> = [];
  for (const [i, g] of (config.tools ?? []).entries()) {
    if (!(await store.collection(mcpServers).get(g.serverId, { tenantId })))
      problems.push({ field: `config.tools[${i}].serverId`, message: `there is no MCP server ${g.serverId}` });
  }
  if (problems.length) throw errors.validation(problems);
}

/** Agent CRUD. Deleting an agent also cancels its unfinished runs and deletes its runs (see `onDelete`). */
export function agentHandlers(store: Store, onDelete: (tenantId: string, agentId: string) => Promise<void>, maxAgentsPerTenant = 1000) {
  const col = store.collection(agents);
  const cap = agentCap(store, maxAgentsPerTenant);

  return {
    async createAgent(req: agentsV1.CreateAgentRequest, ctx: CallContext): Promise<agentsV1.CreateAgentResponse> {
      const { auth } = authed(ctx, 'agents:write');
      const name = checkText('name', req.name);
      const systemPrompt = checkText('systemPrompt', req.systemPrompt);
      const config = mergeConfig(DEFAULT_CONFIG, req.config);
      await checkServers(store, auth.tid, config);
      const now = nowIso();
      const doc: AgentDoc = { id: newId('agt'), tenantId: auth.tid, name, systemPrompt, config, createdAt: now, updatedAt: now };
      await cap.transaction(auth.tid, async (tx, places) => {
        await places.take();
        await tx.collection(agents).insert(doc);
      });
      return { agent: toAgent(doc) };
    },

    async listAgents(req: agentsV1.ListAgentsRequest, ctx: CallContext): Promise<agentsV1.ListAgentsResponse> {
      const { auth } = authed(ctx, 'agents:read');
      const page = await col.find({ tenantId: auth.tid }, { limit: req.limit || 20, cursor: req.cursor || null });
      return { agents: page.items.map(toAgent), nextCursor: page.nextCursor ?? '' };
    },

    async getAgent(req: agentsV1.GetAgentRequest, ctx: CallContext): Promise<agentsV1.GetAgentResponse> {
      const { auth } = authed(ctx, 'agents:read');
      return { agent: toAgent(await loadAgent(store, auth.tid, req.id)) };
    },

    async updateAgent(req: agentsV1.UpdateAgentRequest, ctx: CallContext): Promise<agentsV1.UpdateAgentResponse> {
      const { auth } = authed(ctx, 'agents:write');
      const current = await loadAgent(store, auth.tid, req.id);
      const patch: Partial<AgentDoc> = { updatedAt: nowIso() };
      if (req.name !== undefined) patch.name = checkText('name', req.name);
      if (req.systemPrompt !== undefined) patch.systemPrompt = checkText('systemPrompt', req.systemPrompt);
      if (req.config || req.clearModel || req.clearTemperature)
        patch.config = mergeConfig(current.config, req.config, { model: req.clearModel, temperature: req.clearTemperature });
      if (req.config?.tools) await checkServers(store, auth.tid, patch.config!);
      // Last writer wins on a whole field; the tenant filter keeps it to the caller's own agent.
      const updated = await col.update(req.id, { tenantId: auth.tid }, patch);
      if (!updated) throw errors.notFound('agent', req.id);
      return { agent: toAgent(updated) };
    },

    async deleteAgent(req: agentsV1.DeleteAgentRequest, ctx: CallContext): Promise<agentsV1.DeleteAgentResponse> {
      const { auth } = authed(ctx, 'agents:write');
      const deleted = await cap.transaction(auth.tid, async (tx, places) => {
        const ok = await tx.collection(agents).delete(req.id, { tenantId: auth.tid });
        if (ok) await places.free();
        return ok;
      });
      if (!deleted) throw errors.notFound('agent', req.id);
      await onDelete(auth.tid, req.id);
      return { id: req.id };
    },
  };
}
