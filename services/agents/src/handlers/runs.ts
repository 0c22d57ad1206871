import { decodeJwt } from 'jose';
import {
  type AuthedContext,
  type CallContext,
  encodeCursor,
  errors,
  idempotent,
  nowIso,
  type OutboxRelay,
  type SecretBox,
  type ServiceClient,
  type Store,
} from '@svc/kit';
import { pricedHold, authed } from '@svc/contracts';
import { planHold, type PricingSettings } from '@svc/llm';
import { agentsV1, type identityV1 } from '@svc/proto';
import { loadAgent } from './agents';
import { queuedRun, runs, type RunCall, type RunDoc, type RunStatus, type StepDoc } from '../collections';
import type { CreditCheck } from '../credits';
import { keyRunSlots } from '../key-concurrency';
import { agentModels, firstCallOf, LlmNotConfigured } from '../model-plan';
import { emitRunEvent, settleRecordedCall } from '../run-events';
import { scopesFor, type ProjectsClient } from '../tools';
import { toRun } from '../views';

export const GOAL_MAX = 10_000;
/** A page of runs stays well under gRPC's 4 MiB message limit: it ends early (with a cursor) when full. */
const PAGE_BYTES = 2 * 1024 * 1024;
/** The longest a delegated token lives (identity's cap); a run paused longer is re-authorised by its approver. */
const DELEGATE_TTL_S = 3600;
const RELEASED = { leaseOwner: null, leaseWorker: null, leaseWaitMs: null } as const;

export interface RunHandlerDeps {
  store: Store;
  relay: OutboxRelay;
  box: SecretBox;
  identity: ServiceClient<typeof identityV1.IdentityServiceService>;
  projects: ProjectsClient;
  credits: CreditCheck;
  /** LLM_MAX_TOKENS: a model call's output bound when the tenant set none (its reservation counts it). */
  defaultMaxTokens: number;
  /** CREDITS_PER_USD and CREDITS_PER_1K_TOKENS: the price of a model without a catalogue price. */
  pricing: PricingSettings;
  /** The local worker: poke it after queueing, abort a run it drives. */
  worker: { notify(): void; abort(runId: string): void };
}

/** A delegated token for the run's background work, sealed for storage, and the scopes it really carries. */
async function delegate(deps: RunHandlerDeps, ctx: AuthedContext, scopes: string[]): Promise<{ sealed: string; scopes: string[] }> {
  const res = await deps.identity.delegateToken({ scopes, ttlSeconds: DELEGATE_TTL_S }, { token: ctx.token, requestId: ctx.requestId });
  const granted = decodeJwt(res.token).scp;
  return { sealed: deps.box.encrypt(res.token), scopes: Array.isArray(granted) ? granted.map(String) : [] };
}

/** A call that left for the provider (or produced something): billed by whoever ends it, never just released. */
const callSent = (c: RunCall) => Boolean(c.sent || c.streamed > 0 || c.usage);

export function runHandlers(deps: RunHandlerDeps) {
  const { store, relay } = deps;
  const col = store.collection(runs);
  const keySlots = keyRunSlots(store);

  async function loadRun(tenantId: string, agentId: string, runId: string): Promise<RunDoc> {
    const doc = await col.get(runId, { tenantId, agentId });
    if (!doc) throw errors.notFound('run', runId);
    return doc;
  }

  /**
   * Moves a run from one of `from` to a new state with a compare-and-set on its revision, retrying when a worker
   * saved a step in between. 409 when the run is in none of `from`.
   */
  async function transition(
    ctx: AuthedContext,
    req: { agentId: string; runId: string },
    from: readonly RunStatus[],
    action: string,
    change: (doc: RunDoc) => Promise<Partial<RunDoc>> | Partial<RunDoc>,
    event?: 'agent.failed',
  ): Promise<RunDoc> {
    for (let attempt = 0; attempt < 20; attempt++) {
      const doc = await loadRun(ctx.auth.tid, req.agentId, req.runId);
      if (!from.includes(doc.status)) throw errors.conflict(`The run is ${doc.status}; it cannot be ${action}`, { status: doc.status });
      const patch = { ...(await change(doc)), rev: doc.rev + 1 };
      const updated = await store.transaction(async (tx) => {
        const u = await tx.collection(runs).update(doc.id, { status: doc.status, rev: doc.rev }, patch);
        if (u && event) await emitRunEvent(tx, event, u);
        // A queued run that ends holds its first call's reservation: given back (no worker will settle it).
        // So does a running run's call that was never sent (the worker has not reached the provider yet); a sent call
        // is its worker's to bill, cut.
        if (u && doc.call && u.call === null && (doc.status === 'queued' || !callSent(doc.call))) await settleRecordedCall(tx, u, doc.call);
        return u;
      });
      if (updated) {
        if (event) relay.notify();
        return updated;
      }
    }
    throw errors.conflict('The run is changing too fast; try again');
  }

  /** The step waiting for approval, resolved one way or the other; the run goes back to the queue. */
  async function decide(req: { agentId: string; runId: string; reason?: string }, ctx: CallContext, approve: boolean): Promise<RunDoc> {
    const c = authed(ctx, 'agents:write');
    await loadAgent(store, c.auth.tid, req.agentId);
    // The approver's authorisation carries the rest of the run (the original one may be close to expiry).
    const fresh = await delegate(deps, c, scopesFor('supervised'));
    const run = await transition(c, req, ['requires_approval'], approve ? 'approved' : 'rejected', (doc) => {
      const waiting = doc.steps.find((s) => s.status === 'requires_approval');
      const patch: Partial<StepDoc> = approve
        ? { status: 'approved' }
        : waiting?.type === 'tool_call'
          ? {
              status: 'rejected',
              completedAt: nowIso(),
              error: `rejected: the user rejected this call${req.reason ? `: ${req.reason}` : ''}`,
            }
          : {
              status: 'rejected',
              completedAt: nowIso(),
              result: { error: 'The user rejected this action.', ...(req.reason ? { reason: req.reason } : {}) },
            };
      return {
        status: 'queued',
        steps: doc.steps.map((s) => (s === waiting ? { ...s, ...patch } : s)),
        delegate: fresh.sealed,
        delegateScopes: fresh.scopes,
      };
    });
    deps.worker.notify();
    return run;
  }

  return {
    async executeAgent(req: agentsV1.ExecuteAgentRequest, ctx: CallContext): Promise<agentsV1.ExecuteAgentResponse> {
      const c = authed(ctx, 'agents:write');
      // Once per Idempotency-Key: the run and the answer commit together (a retry after a crash finds that run).
      const scope = { tenantId: c.auth.tid, operation: 'executeAgent', key: ctx.idempotencyKey, body: req };
      const answer = await idempotent<agentsV1.ExecuteAgentResponse>(store, scope, async (commit) => {
        const goal = req.goal.trim();
        const problems = [];
        if (goal.length < 1 || goal.length > GOAL_MAX) problems.push({ field: 'goal', message: `must be 1 to ${GOAL_MAX} characters` });
        if (req.projectId.length < 1 || req.projectId.length > 100) problems.push({ field: 'projectId', message: 'is required' });
        if (problems.length) throw errors.validation(problems);
        const agent = await loadAgent(store, c.auth.tid, req.agentId);
        const call = { token: c.token, requestId: c.requestId };
        // Asked at once, answered in order. The project must be the caller's (the projects service answers NOT_FOUND
        // for another tenant's id); validation includes llm_not_configured (400), then credits (402): CONTRACT.md 5.
        const [project, models, granted] = await Promise.allSettled([
          deps.projects.getProject({ id: req.projectId }, call),
          agentModels(deps.identity, call, agent.config.model ?? undefined, deps),
          delegate(deps, c, scopesFor(agent.config.autonomyLevel)),
        ]);
        if (project.status === 'rejected') throw project.reason;
        if (models.status === 'rejected') {
          if (models.reason instanceof LlmNotConfigured)
            throw errors.badRequest('llm_not_configured', 'No LLM is configured: set one with PATCH /api/v1/tenant/settings/llm');
          throw models.reason;
        }
        // The first model call's reservation (its prompt as known now: the agent's instructions and the goal), held
        // from here so that concurrent executes cannot all start on the same credits.
        const { plan, keySource } = models.value;
        const promptChars = agent.systemPrompt.length + goal.length;
        const firstCall = firstCallOf(plan, keySource, promptChars);
        const hold = pricedHold({ callId: firstCall.id, source: 'agent_run', sourceId: '', model: plan.name }, promptChars, planHold(plan));
        await deps.credits.reserve(c.token, hold);
        if (granted.status === 'rejected') {
          await deps.credits.release(c.token, firstCall.id).catch(() => undefined);
          throw granted.reason;
        }
        const doc = queuedRun({
          tenantId: c.auth.tid,
          agentId: agent.id,
          projectId: req.projectId,
          goal,
          agent: { name: agent.name, systemPrompt: agent.systemPrompt, config: agent.config },
          delegate: granted.value.sealed,
          delegateScopes: granted.value.scopes,
          credentialId: c.auth.sid,
          credentialType: c.auth.typ,
          requestId: c.requestId,
          userId: c.auth.sub,
          call: firstCall,
        });
        try {
          await keySlots.prepare(c.auth);
          return await commit(async (tx) => {
            await keySlots.take(tx, c.auth);
            await tx.collection(runs).insert(doc);
            return { run: toRun(doc) };
          });
        } catch (err) {
          await deps.credits.release(c.token, firstCall.id).catch(() => undefined);
          throw err;
        }
      });
      deps.worker.notify();
      return answer;
    },

    async listRuns(req: agentsV1.ListRunsRequest, ctx: CallContext): Promise<agentsV1.ListRunsResponse> {
      const { auth } = authed(ctx, 'agents:read');
      await loadAgent(store, auth.tid, req.agentId);
      const page = await col.find({ tenantId: auth.tid, agentId: req.agentId }, { limit: req.limit || 20, cursor: req.cursor || null });
      const out: agentsV1.Run[] = [];
      let bytes = 0;
      for (const doc of page.items) {
        const run = toRun(doc);
        bytes += agentsV1.Run.encode(run).finish().byteLength;
        // Long runs carry their steps: a page holds at least one run, then as many as fit.
        if (out.length > 0 && bytes > PAGE_BYTES) {
          const last = page.items[out.length - 1];
          return { runs: out, nextCursor: encodeCursor(last.createdAt, last.id) };
        }
        out.push(run);
      }
      return { runs: out, nextCursor: page.nextCursor ?? '' };
    },

    async getRun(req: agentsV1.GetRunRequest, ctx: CallContext): Promise<agentsV1.GetRunResponse> {
      const { auth } = authed(ctx, 'agents:read');
      return { run: toRun(await loadRun(auth.tid, req.agentId, req.runId)) };
    },

    async cancelRun(req: agentsV1.CancelRunRequest, ctx: CallContext): Promise<agentsV1.CancelRunResponse> {
      const c = authed(ctx, 'agents:write');
      const run = await transition(
        c,
        req,
        ['queued', 'running', 'requires_approval'],
        'cancelled',
        (doc) => ({
          status: 'cancelled',
          error: 'cancelled: the run was cancelled by a user',
          completedAt: nowIso(),
          ...RELEASED,
          // Its reservation is given back here when no worker will bill the call: queued, or not sent yet.
          ...(doc.status === 'queued' || (doc.call && !callSent(doc.call)) ? { call: null } : {}),
        }),
        'agent.failed',
      );
      deps.worker.abort(run.id);
      return { run: toRun(run) };
    },

    async approveRun(req: agentsV1.ApproveRunRequest, ctx: CallContext): Promise<agentsV1.ApproveRunResponse> {
      return { run: toRun(await decide(req, ctx, true)) };
    },

    async rejectRun(req: agentsV1.RejectRunRequest, ctx: CallContext): Promise<agentsV1.RejectRunResponse> {
      if (req.reason.length > 2000) throw errors.validation([{ field: 'reason', message: 'must be at most 2000 characters' }]);
      return { run: toRun(await decide({ ...req, reason: req.reason || undefined }, ctx, false)) };
    },

    /** When an agent is deleted: its unfinished runs end as cancelled (announced), then its runs go with it. */
    async endRunsOf(tenantId: string, agentId: string): Promise<void> {
      // Rounds, because a worker saving a step changes a run's revision under us; each round re-reads.
      for (let round = 0; round < 20; round++) {
        let left = 0;
        for (const status of ['queued', 'running', 'requires_approval'] as const) {
          const page = await col.find({ agentId, status }, { limit: 100 });
          for (const r of page.items) {
            if (r.tenantId !== tenantId) continue;
            const done = await store.transaction(async (tx) => {
              const u = await tx.collection(runs).update(
                r.id,
                { status, rev: r.rev },
                {
                  status: 'cancelled',
                  error: 'cancelled: the agent was deleted',
                  completedAt: nowIso(),
                  ...RELEASED,
                  rev: r.rev + 1,
                  ...(status === 'queued' ? { call: null } : {}),
                },
              );
              if (u) await emitRunEvent(tx, 'agent.failed', u);
              if (u && status === 'queued' && r.call) await settleRecordedCall(tx, u, r.call);
              return u;
            });
            if (done) deps.worker.abort(r.id);
            else left++;
          }
          if (page.nextCursor) left++;
        }
        relay.notify();
        if (left === 0) break;
      }
      await col.deleteMany({ tenantId, agentId });
    },
  };
}
