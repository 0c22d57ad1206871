import { newId, nowIso, type CollectionDef, type Store, TenantCap } from '@svc/kit';

export const AUTONOMY_LEVELS = ['manual', 'supervised', 'autonomous'] as const;
export type AutonomyLevel = (typeof AUTONOMY_LEVELS)[number];

export interface AgentConfigDoc {
  autonomyLevel: AutonomyLevel;
  /** Model calls a run may make; the last one is offered no tools, so the run ends with an answer. */
  maxSteps: number;
  /** Wall-clock seconds a run may spend running (time waiting for approval does not count). */
  timeBudgetSeconds: number;
  /** Overrides the tenant's model; null: the tenant's (or platform's) model. */
  model: string | null;
  temperature: number | null;
  /** MCP tools the agent may call: exact names per registered server (absent on agents stored before: none). */
  tools?: AgentToolGrant[];
}

export interface AgentToolGrant {
  serverId: string;
  allow: string[];
}

export interface AgentDoc {
  id: string;
  tenantId: string;
  name: string;
  systemPrompt: string;
  config: AgentConfigDoc;
  createdAt: string;
  updatedAt: string;
}

/** Listed per tenant, newest first: the index serves every page at the same cost. */
export const agents: CollectionDef<AgentDoc> = { name: 'agents', indexes: [{ fields: ['tenantId'] }] };

/** AGENTS_PER_TENANT, exact across replicas: every insert and delete of an agent goes through it (kit caps). */
export function agentCap(store: Store, limit: number): TenantCap {
  return new TenantCap(store, {
    kind: 'agent',
    plural: 'agents',
    limit,
    count: (tx, tenantId) => tx.collection(agents).count({ tenantId }),
  });
}

export const RUN_STATUSES = ['queued', 'running', 'requires_approval', 'completed', 'failed', 'cancelled'] as const;
export type RunStatus = (typeof RUN_STATUSES)[number];

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  /** Of inputTokens, those read from the provider's prompt cache (when it reports them). */
  cachedInputTokens?: number;
}

export interface ToolCallDoc {
  id: string;
  name: string;
  arguments: Record<string, unknown>;
}

/**
 * Tool step states: `pending` (recorded with the model's answer, not yet run), `requires_approval`, `approved`,
 * then `completed`, `failed` or `rejected`. Model steps are `completed` when recorded.
 */
export type StepStatus = 'pending' | 'requires_approval' | 'approved' | 'completed' | 'failed' | 'rejected';

export interface StepDoc {
  index: number;
  type: 'model' | 'tool' | 'tool_call';
  status: StepStatus;
  startedAt: string;
  completedAt: string | null;
  /** model: the text it produced, and the tool calls it made that will be run (their results are tool steps). */
  text?: string;
  toolCalls?: ToolCallDoc[];
  usage?: Usage;
  /** model: the model that served the call (a fallback's when the main model failed before answering) */
  model?: string;
  /** tool (built-in) and tool_call (an MCP server's tool: `toolName` is the MCP tool's own name) */
  toolName?: string;
  /** tool_call: the MCP server, the error of a refused or failed call (null when it succeeded), its duration. */
  serverId?: string;
  error?: string | null;
  durationMs?: number | null;
  toolCallId?: string;
  arguments?: Record<string, unknown>;
  result?: unknown;
}

export interface RunDoc {
  id: string;
  tenantId: string;
  /** The credential that started the run (the JWT's `sid` and `typ`), so billing shows usage per API key. */
  credentialId?: string;
  credentialType?: string;
  /** The HTTP request that started the run and the user behind it (a key's creator): the request log keeps them. */
  requestId?: string;
  userId?: string;
  agentId: string;
  projectId: string;
  goal: string;
  status: RunStatus;
  output: string | null;
  error: string | null;
  steps: StepDoc[];
  usage: Usage;
  createdAt: string;
  startedAt: string | null;
  completedAt: string | null;
  /** The agent as it was at execute time: a run does not change course when the agent is edited. */
  agent: { name: string; systemPrompt: string; config: AgentConfigDoc };
  /** Bumped by every change of state or steps (not by lease renewals): the compare-and-set guard of API actions. */
  rev: number;
  /** Worker lease: the operator's worker name (AGENTS_WORKER_ID, when set) and the claiming process (kit newHolderId). */
  leaseWorker: string | null;
  leaseOwner: string | null;
  /**
   * The fence: bumped by every claim and take-over, never reset. Every commit of the worker's run is a
   * compare-and-set on (owner, generation), so a worker whose run was taken over can no longer write it.
   * Absent on runs stored before it existed.
   */
  leaseGen?: number;
  /** The holder's heartbeat: bumped while it drives the run; observers judge it on their own clocks (kit LeaseWatch). */
  leaseBeat?: number;
  /**
   * How long another worker must see the beat stand still before taking the run over: the holder's AGENTS_LEASE_MS,
   * 0 when handed back on shutdown (taken at once), a back-off when handed back after a failure; null when not leased.
   */
  leaseWaitMs?: number | null;
  /** Times a worker claimed the run; a run that keeps killing its worker fails after AGENTS_MAX_ATTEMPTS. */
  attempts: number;
  /** Running time left (ms); saved with each step so a resumed run keeps its budget. */
  budgetLeftMs: number;
  /** Delegated token (sealed) the run's tools and settings lookups use, and the scopes it carries. */
  delegate: string;
  delegateScopes: string[];
  /**
   * The model call whose billing reservation is open (absent or null: none): reserved at execute for the first call,
   * then before each call. While the call streams its worker stores what it produced (text and tool arguments so far,
   * the provider's usage once it arrives), so a run taken over after a crash bills the cut call from this, once per
   * call id (billing's ledger), and one that produced nothing is reused for the next call.
   */
  call?: RunCall | null;
}

export interface RunCall {
  /** The reservation's call id in billing; the call's `llm.usage` event carries it. */
  id: string;
  /** The prompt at 4 characters a token: the input of a cut call's estimate. */
  promptTokens: number;
  /** Characters streamed so far (text and tool arguments). */
  streamed: number;
  /**
   * Stored before the request goes to the provider: from then on the provider may charge for it, so a crash bills it
   * (at least its prompt) and a retry is a call of its own. Absent on calls stored by an older version: not sent.
   */
  sent?: boolean;
  usage: Usage | null;
  provider: string;
  model: string;
  keySource: string;
  /** The model as the run asked for it (a catalogue name or the default model's name); `model` is what served. */
  name?: string;
  /** The catalogue entry that serves ('' for the default model and its fallbacks) and its price. */
  entryId?: string;
  price?: { input: number; output: number; cachedInput: number; source: string };
}

/** A new run, queued: the agent as it is now, its whole time budget, no lease, no steps. */
export function queuedRun(
  o: Pick<
    RunDoc,
    'tenantId' | 'agentId' | 'projectId' | 'goal' | 'agent' | 'delegate' | 'delegateScopes' | 'credentialId' | 'credentialType' | 'call'
  > &
    Partial<Pick<RunDoc, 'requestId' | 'userId'>>,
): RunDoc {
  return {
    id: newId('run'),
    ...o,
    status: 'queued',
    output: null,
    error: null,
    steps: [],
    usage: { inputTokens: 0, outputTokens: 0 },
    createdAt: nowIso(),
    startedAt: null,
    completedAt: null,
    rev: 0,
    leaseWorker: null,
    leaseOwner: null,
    leaseGen: 0,
    leaseBeat: 0,
    leaseWaitMs: null,
    attempts: 0,
    budgetLeftMs: o.agent.config.timeBudgetSeconds * 1000,
  };
}

export const runs: CollectionDef<RunDoc> = {
  name: 'runs',
  indexes: [
    // An agent's runs, newest first.
    { fields: ['tenantId', 'agentId'] },
    // The worker's queue (oldest first) and its scan of running runs for expired leases.
    { fields: ['status'] },
    // Unfinished runs of a deleted agent.
    { fields: ['agentId', 'status'] },
    // A tenant's running runs, counted against its limit before a claim.
    { fields: ['tenantId', 'status'] },
  ],
};

export interface McpToolDoc {
  name: string;
  description: string;
  inputSchema: Record<string, unknown>;
  readOnly: boolean;
}

/** A tenant's MCP server (CONTRACT.md 11). The bearer token is a secret's name, resolved at each connection. */
export interface McpServerDoc {
  id: string;
  tenantId: string;
  name: string;
  url: string;
  authSecret: string | null;
  status: 'ready' | 'error';
  error: string | null;
  tools: McpToolDoc[];
  createdAt: string;
  updatedAt: string;
}

export const mcpServers: CollectionDef<McpServerDoc> = { name: 'mcp_servers', indexes: [{ fields: ['tenantId'] }] };

/** MCP_SERVERS_PER_TENANT (20), exact across replicas. */
export function mcpServerCap(store: Store, limit: number): TenantCap {
  return new TenantCap(store, {
    kind: 'mcp_server',
    plural: 'MCP servers',
    limit,
    count: (tx, tenantId) => tx.collection(mcpServers).count({ tenantId }),
  });
}
