import { createClient, errors, type ServiceClient } from '@svc/kit';
import { llmCandidatesFrom, type ResolvedCatalogueEntry } from '@svc/llm';
import { agentsV1, identityV1, projectsV1 } from '@svc/proto';
import type { ReplyLlm } from './replies';

/** What a reply takes from the agent a session names. */
export interface AgentProfile {
  systemPrompt: string;
  model: string;
  temperature: number | undefined;
}

/**
 * The other services chat asks on the caller's behalf, always with the caller's own token, so each answers only
 * for the caller's tenant (another tenant's project or agent is NOT_FOUND there, and so here).
 */
export interface Peers {
  /** Throws RESOURCE_NOT_FOUND when the project is not the caller's. */
  checkProject(id: string, token: string): Promise<void>;
  /** Throws RESOURCE_NOT_FOUND when the agent is not the caller's. */
  agent(id: string, token: string): Promise<AgentProfile>;
  /**
   * The tenant's LLM, or the platform default; throws VALIDATION_ERROR `llm_not_configured` when neither exists.
   * Kept for `llmCacheMs` per tenant (a settings change reaches chat within that time); refusals are not kept.
   */
  llm(token: string, tenantId: string): Promise<ReplyLlm>;
  /**
   * The enabled catalogue entries of a name (every enabled entry for ''), keys resolved; [] when the name has none.
   * Kept for `llmCacheMs` per tenant and name, as the LLM settings are.
   */
  catalogue(token: string, tenantId: string, name: string): Promise<ResolvedCatalogueEntry[]>;
  /** An agent's runs (responses on `agent:<id>`), on the caller's behalf. */
  /** `idempotencyKey`: the caller's scoped key, under which the agents service starts the run once. */
  executeAgent(req: agentsV1.ExecuteAgentRequest, token: string, idempotencyKey?: string): Promise<agentsV1.Run>;
  getRun(agentId: string, runId: string, token: string): Promise<agentsV1.Run>;
  decideRun(agentId: string, runId: string, approve: boolean, reason: string, token: string): Promise<agentsV1.Run>;
  cancelRun(agentId: string, runId: string, token: string): Promise<void>;
  close(): void;
}

const copy = (v: ReplyLlm): ReplyLlm => ({
  settings: { ...v.settings },
  fallbacks: (v.fallbacks ?? []).map((f) => ({ ...f })),
  keySource: v.keySource,
});

export function grpcPeers(
  addresses: { identity: string; projects: string; agents: string },
  options: { deadlineMs: number; llmCacheMs: number },
  identity?: ServiceClient<typeof identityV1.IdentityServiceService>,
): Peers {
  const { deadlineMs, llmCacheMs } = options;
  // The LLM lookup is on the path to every reply's first token: one identity round trip saved per message. The
  // answer is kept as it is asked: the calls that miss together (every call in flight when it lapses) share one.
  const llmCache = new Map<string, { value: Promise<ReplyLlm>; until: number }>();
  const catalogueCache = new Map<string, { value: Promise<ResolvedCatalogueEntry[]>; until: number }>();
  function kept<T>(cache: Map<string, { value: Promise<T>; until: number }>, key: string, ask: () => Promise<T>): Promise<T> {
    const cached = cache.get(key);
    if (cached && cached.until > Date.now()) return cached.value;
    const value = ask();
    if (llmCacheMs > 0) {
      if (cache.size >= 10_000) cache.clear();
      const entry = { value, until: Date.now() + llmCacheMs };
      cache.set(key, entry);
      // Refusals are not kept.
      value.catch(() => cache.get(key) === entry && cache.delete(key));
    }
    return value;
  }
  const id = identity ?? createClient(identityV1.IdentityServiceService, addresses.identity, { deadlineMs });
  const projects = createClient(projectsV1.ProjectsServiceService, addresses.projects, { deadlineMs });
  const agents = createClient(agentsV1.AgentsServiceService, addresses.agents, { deadlineMs });
  return {
    async checkProject(projectId, token) {
      await projects.getProject({ id: projectId }, { token });
    },
    async agent(agentId, token) {
      const { agent } = await agents.getAgent({ id: agentId }, { token });
      if (!agent) throw errors.notFound('agent', agentId);
      return { systemPrompt: agent.systemPrompt, model: agent.config?.model ?? '', temperature: agent.config?.temperature };
    },
    async llm(token, tenantId) {
      const value = await kept(llmCache, tenantId, async () => {
        const { settings: s } = await id.resolveLlmSettings({}, { token });
        if (!s) throw errors.badRequest('llm_not_configured', 'No LLM is configured: set one with PATCH /api/v1/tenant/settings/llm');
        const [settings, ...fallbacks] = llmCandidatesFrom(s);
        return { settings, fallbacks, keySource: s.source };
      });
      return copy(value);
    },
    async catalogue(token, tenantId, name) {
      return kept(catalogueCache, `${tenantId}|${name}`, async () => (await id.resolveModels({ name }, { token })).models);
    },
    async executeAgent(req, token, idempotencyKey) {
      return (await agents.executeAgent(req, { token, idempotencyKey })).run!;
    },
    async getRun(agentId, runId, token) {
      return (await agents.getRun({ agentId, runId }, { token })).run!;
    },
    async decideRun(agentId, runId, approve, reason, token) {
      return approve
        ? (await agents.approveRun({ agentId, runId }, { token })).run!
        : (await agents.rejectRun({ agentId, runId, reason }, { token })).run!;
    },
    async cancelRun(agentId, runId, token) {
      await agents.cancelRun({ agentId, runId }, { token });
    },
    close() {
      if (!identity) id.close();
      projects.close();
      agents.close();
    },
  };
}
