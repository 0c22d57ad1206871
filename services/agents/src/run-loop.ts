/**
 * One run's agent loop: the system prompt (the agent's plus the project's context) and the goal go to the model;
 * its tool calls are recorded, run (or held for approval) and answered; repeat until the model answers without
 * tools, `maxSteps` model calls are made (the last one is offered no tools, so it must answer) or the time budget
 * runs out. Every step is saved as it happens, so a run taken over after a crash continues from its recorded steps.
 */
import { decodeJwt } from 'jose';
import { isAppError, type Logger, nowIso, type SecretBox, type ServiceClient, type StoreSession } from '@svc/kit';
import { type CallOutcome, pricedHold } from '@svc/contracts';
import {
  type CandidateMeta,
  type CircuitBreaker,
  collect,
  isLlmError,
  type LlmError,
  type LlmMessage,
  type LlmRequest,
  type LlmTransport,
  type ModelChain,
  planHold,
  type PricingSettings,
  routePlan,
  type ServedModel,
} from '@svc/llm';
import type { identityV1, projectsV1 } from '@svc/proto';
import type { RunCall, RunDoc, StepDoc, Usage } from './collections';
import type { CreditCheck } from './credits';
import { agentModels, firstCallOf, LlmNotConfigured } from './model-plan';
import { emitRunEvent, emitUsage, settleRecordedCall } from './run-events';
import { callTool, EMPTY_TOOLSET, loadToolset, toolCallStep, type McpRuntime, type McpToolset } from './mcp-tools';
import { runTool, toolsFor, type ProjectsClient, type Tool } from './tools';

/** The claimed run as the loop sees it: every save is a compare-and-set on the lease, which throws LostLease. */
export interface Lease {
  run: RunDoc;
  /** Aborted when the run is cancelled, the lease is lost or the process stops. */
  signal: AbortSignal;
  save(patch: Partial<RunDoc>, events?: (tx: StoreSession, run: RunDoc) => Promise<void>): Promise<RunDoc>;
  /** Writes events whatever became of the lease (a cancelled run's cut-off model call is still billed). */
  publish(events: (tx: StoreSession) => Promise<void>): Promise<void>;
  /** Gives the run back, still `running`, for any worker to take again in `delayMs` (counts as an attempt). */
  handBack(delayMs: number): Promise<void>;
  /**
   * Stores what the open model call produced so far (fenced by the claim, in the background, at most one write in
   * flight, the latest value winning): a worker that takes the run over bills it.
   */
  record(call: RunCall): void;
}

export class LostLease extends Error {
  constructor() {
    super('the run is no longer leased to this worker');
    this.name = 'LostLease';
  }
}

export interface LoopDeps {
  identity: ServiceClient<typeof identityV1.IdentityServiceService>;
  projects: ProjectsClient;
  box: SecretBox;
  /** The egress-guarded transport every provider request goes through. */
  llmTransport: LlmTransport;
  credits: CreditCheck;
  /** LLM_MAX_TOKENS: a model call's output bound when the tenant set none (its reservation counts it). */
  defaultMaxTokens: number;
  logger: Logger;
  llmTimeoutMs: number;
  llmMaxRetries: number;
  /** The process's circuit breaker over model deployments (absent: none). */
  breaker?: CircuitBreaker;
  /** Retries of a model call that failed in a retryable way after the provider's own retries (a cut stream). */
  stepRetries: number;
  retryBaseMs: number;
  /** MCP servers' tools (absent: runs offer the built-in tools only). */
  mcp?: McpRuntime;
  /** CREDITS_PER_USD and CREDITS_PER_1K_TOKENS: the price of a model without a catalogue price. */
  pricing: PricingSettings;
}

/** Our own services failing to answer: the run is handed back and retried, up to AGENTS_MAX_ATTEMPTS claims. */
const TRANSIENT: readonly string[] = ['SERVICE_UNAVAILABLE', 'GATEWAY_TIMEOUT'];
/** Caps that keep one run's document (all steps) well under 4 MiB at 50 steps. */
const MAX_TEXT_CHARS = 32_000;
const MAX_ARGUMENTS_CHARS = 16_000;
const NO_USAGE: Usage = { inputTokens: 0, outputTokens: 0 };
const RELEASED = { leaseOwner: null, leaseWorker: null, leaseWaitMs: null } as const;

function withStep(steps: StepDoc[], index: number, patch: Partial<StepDoc>): StepDoc[] {
  return steps.map((s) => (s.index === index ? { ...s, ...patch } : s));
}

function isTerminalToolStatus(status: StepDoc['status']): boolean {
  return status === 'completed' || status === 'failed' || status === 'rejected';
}

export function systemPrompt(run: RunDoc, project: projectsV1.Project): string {
  const context = [
    `You are working in the project "${project.name}" (id ${project.id}).`,
    `Language: ${project.language || 'not set'}`,
    `Description: ${project.description || '(none)'}`,
  ].join('\n');
  return [run.agent.systemPrompt.trim(), context].filter(Boolean).join('\n\n');
}

/** The conversation so far, rebuilt from the recorded steps. */
export function messagesOf(run: RunDoc, system: string): LlmMessage[] {
  const out: LlmMessage[] = [
    { role: 'system', content: system },
    { role: 'user', content: run.goal },
  ];
  for (const s of run.steps) {
    if (s.type === 'model')
      out.push({ role: 'assistant', content: s.text ?? '', ...(s.toolCalls?.length ? { toolCalls: s.toolCalls } : {}) });
    else if (isTerminalToolStatus(s.status))
      out.push({
        role: 'tool',
        toolCallId: s.toolCallId!,
        content: JSON.stringify(
          s.type === 'tool_call' && s.error ? { error: s.error, ...(s.result ? { result: s.result } : {}) } : (s.result ?? null),
        ),
      });
  }
  return out;
}

/** A safe, useful reason for a failed model call: LlmError messages never hold keys or headers. */
export function describeLlmError(err: LlmError): string {
  const status = err.status ? ` (HTTP ${err.status})` : '';
  return `llm_${err.kind}: ${err.message}${status}`;
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    }
  });
}

/** Stored progress of a streaming call at most this often (and the provider's usage at once). */
const RECORD_MS = 200;

/**
 * One model call (and its retries after a cut stream, each a call of its own): `open` reserves each attempt's
 * credits; an attempt that ended early is billed for the usage reported, else an estimate from what streamed, or
 * releases its reservation when it produced nothing.
 */
async function callModel(
  provider: ModelChain,
  metaOf: (index: number) => CandidateMeta,
  request: LlmRequest,
  signal: AbortSignal,
  deps: LoopDeps,
  open: () => Promise<RunCall>,
  record: (call: RunCall) => void,
  billCutOff: (call: RunCall, outcome: CallOutcome) => Promise<void>,
) {
  for (let attempt = 0; ; attempt++) {
    const call = { ...(await open()) };
    // The first streamed event is recorded at once: a crash any time after it bills what the provider sent.
    let recordedAt = -Infinity;
    const startedAt = performance.now();
    let ttftMs = 0;
    try {
      // The model that answers (an entry's sibling, or a fallback, when the first failed before its first token) is
      // the call's model, billed at its price.
      const onServed = (served: ServedModel) => {
        const meta = metaOf(served.index);
        Object.assign(call, { provider: served.provider, model: served.model, entryId: meta.entryId, price: meta.price });
      };
      const reply = await collect(provider.stream(request, { signal, onServed }), (e) => {
        if (ttftMs === 0 && (e.type === 'text' || e.type === 'tool_call')) ttftMs = Math.max(1, performance.now() - startedAt);
        if (e.type === 'text') call.streamed += e.delta.length;
        else if (e.type === 'tool_call') call.streamed += JSON.stringify(e.arguments).length;
        else if (e.type === 'usage') {
          const cached = e.cachedInputTokens;
          call.usage = { inputTokens: e.inputTokens, outputTokens: e.outputTokens, ...(cached ? { cachedInputTokens: cached } : {}) };
          record({ ...call });
          return;
        }
        if (Date.now() - recordedAt >= RECORD_MS) {
          recordedAt = Date.now();
          record({ ...call });
        }
      });
      const outcome: CallOutcome = { status: 'ok', errorCode: '', latencyMs: performance.now() - startedAt, ttftMs };
      return { reply, call, outcome };
    } catch (err) {
      // Cancelled, out of time, shut down or cut by the provider mid-stream: the provider charged for what it sent.
      const outcome: CallOutcome = {
        status: signal.aborted || (isLlmError(err) && err.kind === 'cancelled') ? 'cancelled' : 'error',
        errorCode: isLlmError(err) ? `LLM_${err.kind.toUpperCase()}` : 'INTERNAL_ERROR',
        latencyMs: performance.now() - startedAt,
        ttftMs,
      };
      await billCutOff(call, outcome).catch((billErr: unknown) =>
        deps.logger.error({ err: billErr }, 'could not record the usage of a cut-off model call'),
      );
      if (!isLlmError(err) || !err.retryable || attempt >= deps.stepRetries || signal.aborted) throw err;
      await sleep(deps.retryBaseMs * 2 ** attempt, signal);
    }
  }
}

class RunFailure extends Error {}

export async function driveRun(lease: Lease, deps: LoopDeps): Promise<void> {
  const budgetMs = Math.max(1, lease.run.budgetLeftMs);
  const deadline = Date.now() + budgetMs;
  const budget = new AbortController();
  const budgetTimer = setTimeout(() => budget.abort(), budgetMs);
  const signal = AbortSignal.any([lease.signal, budget.signal]);
  const budgetLeftMs = () => Math.max(0, deadline - Date.now());

  const fail = async (error: string) => {
    const open = lease.run.call;
    await lease.save(
      { ...RELEASED, status: 'failed', error, completedAt: nowIso(), budgetLeftMs: budgetLeftMs(), call: null },
      async (tx, doc) => {
        await emitRunEvent(tx, 'agent.failed', doc);
        // Its open call (reserved, perhaps cut): billed from what was stored, or its reservation given back.
        if (open) await settleRecordedCall(tx, doc, open);
      },
    );
  };

  try {
    await loop(lease, deps, signal, budgetLeftMs);
  } catch (err) {
    if (err instanceof LostLease || lease.signal.aborted) return; // cancelled, taken over or shutting down: not ours to record
    if (isAppError(err) && TRANSIENT.includes(err.code) && !budget.signal.aborted) {
      // Identity or projects did not answer: try again later rather than fail the run for a blip.
      deps.logger.warn({ runId: lease.run.id, code: err.code }, 'a service the run needs is unavailable; handing the run back');
      await lease.handBack(Math.min(30_000, deps.retryBaseMs * 2 ** lease.run.attempts)).catch(() => undefined);
      return;
    }
    let reason: string;
    if (budget.signal.aborted) reason = `time_budget_exceeded: the run used its ${Math.round(lease.run.agent.config.timeBudgetSeconds)} s`;
    else if (err instanceof RunFailure) reason = err.message;
    else if (isLlmError(err)) reason = describeLlmError(err);
    else if (isAppError(err)) reason = `${err.code}: ${err.message}`;
    else {
      deps.logger.error({ err, runId: lease.run.id }, 'run failed unexpectedly');
      reason = 'internal_error: the run failed unexpectedly';
    }
    try {
      await fail(reason);
    } catch (saveErr) {
      if (!(saveErr instanceof LostLease)) deps.logger.error({ err: saveErr, runId: lease.run.id }, 'could not record a failed run');
    }
  } finally {
    clearTimeout(budgetTimer);
  }
}

async function loop(lease: Lease, deps: LoopDeps, signal: AbortSignal, budgetLeftMs: () => number): Promise<void> {
  let run = lease.run;
  const config = run.agent.config;
  const token = deps.box.decrypt(run.delegate);
  if ((decodeJwt(token).exp ?? 0) * 1000 < Date.now() + 5_000)
    throw new RunFailure('delegation_expired: the authorization given at execute (or approve) expired; execute the agent again');

  let models: Awaited<ReturnType<typeof agentModels>>;
  try {
    models = await agentModels(deps.identity, { token, requestId: run.requestId }, config.model ?? undefined, {
      pricing: deps.pricing,
      defaultMaxTokens: deps.defaultMaxTokens,
      extra: { timeoutMs: deps.llmTimeoutMs, transport: deps.llmTransport },
    });
  } catch (err) {
    if (err instanceof LlmNotConfigured) throw new RunFailure(err.message);
    throw err;
  }
  let project: projectsV1.Project;
  try {
    project = (await deps.projects.getProject({ id: run.projectId }, { token })).project!;
  } catch (err) {
    if (isAppError(err) && err.code === 'RESOURCE_NOT_FOUND') throw new RunFailure("project_not_found: the run's project no longer exists");
    throw err;
  }
  // The agent's catalogue name (its entries by weight) or the default model, then the fallbacks. Every call's output
  // is bounded (each deployment's own bound), so its reservation is its most possible cost at the dearest price.
  const { plan, keySource } = models;
  const hold = planHold(plan);
  const routing = {
    breaker: deps.breaker,
    scope: run.tenantId,
    maxRetries: deps.llmMaxRetries,
    onAttemptFailed: (a: { provider: string; model: string; error: LlmError; skipped: boolean }) =>
      deps.logger.warn(
        { runId: run.id, provider: a.provider, model: a.model, kind: a.error.kind, skipped: a.skipped },
        a.skipped ? 'model skipped (circuit open)' : 'model failed before answering',
      ),
  };
  const tools = toolsFor(config.autonomyLevel, run.delegateScopes);
  // The agent's MCP tools as registered now (manual runs offer none); a built-in's name is never shadowed.
  const mcp: McpToolset =
    deps.mcp && config.autonomyLevel !== 'manual' && config.tools?.length
      ? await loadToolset(deps.mcp, run.tenantId, config.tools, new Set(tools.map((t) => t.spec.name)))
      : EMPTY_TOOLSET;
  const specs = [...tools.map((t) => t.spec), ...mcp.offers.map((o) => o.spec)];
  const system = systemPrompt(run, project);

  for (;;) {
    if (signal.aborted) throw signal.reason ?? new Error('aborted');

    const pending = run.steps.find((s) => s.type !== 'model' && (s.status === 'pending' || s.status === 'approved'));
    if (pending?.type === 'tool_call') {
      run = await runMcpStep(lease, pending, mcp, config.autonomyLevel, deps.mcp!, token, signal, budgetLeftMs);
      if (run.status !== 'running') return; // waiting for approval
      continue;
    }
    if (pending) {
      run = await runToolStep(
        lease,
        pending,
        tools,
        config.autonomyLevel,
        { projects: deps.projects, token, projectId: run.projectId },
        budgetLeftMs,
      );
      if (run.status !== 'running') return; // waiting for approval
      continue;
    }

    const modelCalls = run.steps.filter((s) => s.type === 'model').length;
    if (modelCalls >= config.maxSteps)
      throw new RunFailure(`max_steps_reached: the agent made ${config.maxSteps} model calls without finishing`);
    // The last allowed call gets no tools, so the run ends with an answer rather than a dangling tool call.
    const offered = modelCalls + 1 < config.maxSteps ? specs : [];

    // Each deployment answers with its own model and output bound; a new draw by weight for every call.
    const routed = routePlan(plan, routing);
    const request: LlmRequest = {
      messages: messagesOf(run, system),
      tools: offered.length ? offered : undefined,
      temperature: config.temperature ?? undefined,
    };
    const promptChars = request.messages.reduce((n, m) => n + (typeof m.content === 'string' ? m.content.length : 0), 0);
    /** The attempt's reservation: the run's open call when it produced nothing yet (reserved at execute, or left by a
     * crashed attempt), else a new one, stored on the run before the call starts. */
    /** Calls of this step that this process billed when they ended early (not to be billed again as crashed). */
    const billedHere = new Set<string>();
    const open = async (): Promise<RunCall> => {
      const prev = lease.run.call;
      // A call that reached the provider before a crash (or a stop) is billed now for what it produced (at least its
      // prompt), once per call id whoever bills it too; only a call never sent is reused.
      const sent = prev && (prev.sent || prev.streamed > 0 || prev.usage);
      if (prev && sent && !billedHere.has(prev.id)) await lease.publish((tx) => settleRecordedCall(tx, lease.run, prev));
      let call = prev && !sent ? prev : null;
      for (let i = 0; i < 2; i++) {
        call ??= firstCallOf(plan, keySource, promptChars);
        let status: string;
        try {
          ({ status } = await deps.credits.reserve(
            token,
            pricedHold({ callId: call.id, source: 'agent_run', sourceId: lease.run.id, model: plan.name }, promptChars, hold),
          ));
        } catch (err) {
          if (isAppError(err) && err.code === 'INSUFFICIENT_CREDITS')
            throw new RunFailure('insufficient_credits: the credits available do not cover the next model call');
          throw err;
        }
        if (status === 'open') break;
        call = null; // that reservation was closed meanwhile (expired): a new one
      }
      // Stored as sent before the request leaves: a crash from here on bills the call rather than reusing its id.
      const held = { ...call!, promptTokens: Math.ceil(promptChars / 4), sent: true };
      const stored = lease.run.call;
      if (stored?.id !== held.id || stored.promptTokens !== held.promptTokens || !stored.sent) {
        try {
          run = await lease.save({ call: held });
        } catch (err) {
          // Cancelled (or taken) while reserving: the call will not be sent, and no run holds it to bill it.
          if (err instanceof LostLease) await deps.credits.release(token, held.id).catch(() => undefined);
          throw err;
        }
      }
      return held;
    };
    const startedAt = nowIso();
    const { reply, call, outcome } = await callModel(
      routed.chain,
      routed.metaOf,
      request,
      signal,
      deps,
      open,
      lease.record,
      (cut, ended) => {
        billedHere.add(cut.id);
        // Refused or failed before any output (a 429, a 5xx, a refused connection): nothing to charge, the hold goes back.
        const produced = cut.streamed > 0 || cut.usage !== null;
        return lease.publish((tx) => settleRecordedCall(tx, run, produced ? cut : { ...cut, sent: false }, ended));
      },
    );
    const usage = reply.usage ?? NO_USAGE;
    // Calls to tools that were not offered are never run (manual runs, the last step). Oversized arguments are
    // replaced (the tool then refuses them), so the model's reply cannot swell the run document.
    const calls = (offered.length ? reply.toolCalls : []).map((c) =>
      JSON.stringify(c.arguments).length > MAX_ARGUMENTS_CHARS ? { ...c, arguments: { truncated: true } } : c,
    );
    const text = reply.text.slice(0, MAX_TEXT_CHARS);
    const index = run.steps.length;
    const modelStep: StepDoc = {
      index,
      type: 'model',
      status: 'completed',
      startedAt,
      completedAt: nowIso(),
      text,
      toolCalls: calls,
      usage,
      model: call.model,
    };
    const toolSteps: StepDoc[] = calls.map((c, i) => {
      const mcpStep = tools.some((t) => t.spec.name === c.name)
        ? null
        : toolCallStep({ index: index + 1 + i, startedAt: nowIso(), toolCallId: c.id, arguments: c.arguments }, c.name, mcp);
      if (mcpStep) return mcpStep;
      const known = offered.some((t) => t.name === c.name);
      return {
        index: index + 1 + i,
        type: 'tool',
        status: known ? 'pending' : 'failed',
        startedAt: nowIso(),
        completedAt: known ? null : nowIso(),
        toolName: c.name,
        toolCallId: c.id,
        arguments: c.arguments,
        ...(known ? {} : { result: { error: `there is no tool named ${c.name}` } }),
      };
    });
    const totals = { inputTokens: run.usage.inputTokens + usage.inputTokens, outputTokens: run.usage.outputTokens + usage.outputTokens };
    const usageEvent = (tx: StoreSession, doc: RunDoc) => emitUsage(tx, doc, { ...call, usage, callId: call.id, outcome });
    // The step and its usage are saved together; when the run was cancelled (or taken) in between, the call was
    // still made and paid for: its usage is recorded on its own.
    const saveStep = (patch: Partial<RunDoc>, more?: (tx: StoreSession, doc: RunDoc) => Promise<void>) =>
      lease
        .save(patch, async (tx, doc) => {
          await usageEvent(tx, doc);
          await more?.(tx, doc);
        })
        .catch(async (err: unknown) => {
          const before = run;
          if (err instanceof LostLease) await lease.publish((tx) => usageEvent(tx, before));
          throw err;
        });

    if (calls.length === 0) {
      if (reply.finishReason === 'error') {
        run = await saveStep({ steps: [...run.steps, modelStep], usage: totals, budgetLeftMs: budgetLeftMs(), call: null });
        throw new RunFailure('llm_refused: the provider ended the reply (content policy)');
      }
      await saveStep(
        {
          ...RELEASED,
          steps: [...run.steps, modelStep],
          usage: totals,
          status: 'completed',
          output: text,
          completedAt: nowIso(),
          budgetLeftMs: budgetLeftMs(),
          call: null,
        },
        (tx, doc) => emitRunEvent(tx, 'agent.completed', doc),
      );
      return;
    }
    run = await saveStep({ steps: [...run.steps, modelStep, ...toolSteps], usage: totals, budgetLeftMs: budgetLeftMs(), call: null });
  }
}

/** Runs one pending (or approved) tool step, or parks the run for approval; returns the saved run. */
async function runToolStep(
  lease: Lease,
  step: StepDoc,
  tools: Tool[],
  level: RunDoc['agent']['config']['autonomyLevel'],
  ctx: Parameters<typeof runTool>[2],
  budgetLeftMs: () => number,
): Promise<RunDoc> {
  const run = lease.run;
  const tool = tools.find((t) => t.spec.name === step.toolName);
  if (!tool)
    return lease.save({
      steps: withStep(run.steps, step.index, {
        status: 'failed',
        completedAt: nowIso(),
        result: { error: `the tool ${step.toolName} is not available` },
      }),
    });
  if (step.status === 'pending' && tool.changesData && level === 'supervised')
    return lease.save({
      ...RELEASED,
      status: 'requires_approval',
      steps: withStep(run.steps, step.index, { status: 'requires_approval' }),
      budgetLeftMs: budgetLeftMs(),
    });
  const { ok, result } = await runTool(tool, step.arguments ?? {}, ctx);
  return lease.save({
    steps: withStep(lease.run.steps, step.index, { status: ok ? 'completed' : 'failed', completedAt: nowIso(), result }),
    budgetLeftMs: budgetLeftMs(),
  });
}

/** Runs one pending (or approved) MCP tool call, or parks the run for approval; returns the saved run. */
async function runMcpStep(
  lease: Lease,
  step: StepDoc,
  set: McpToolset,
  level: RunDoc['agent']['config']['autonomyLevel'],
  rt: McpRuntime,
  token: string,
  signal: AbortSignal,
  budgetLeftMs: () => number,
): Promise<RunDoc> {
  const run = lease.run;
  const offer = set.offers.find((o) => o.server.id === step.serverId && o.tool.name === step.toolName);
  if (!offer)
    return lease.save({
      steps: withStep(run.steps, step.index, {
        status: 'failed',
        completedAt: nowIso(),
        error: `tool_unavailable: the tool ${step.toolName} is no longer offered by its server or allowed for this agent`,
      }),
    });
  if (step.status === 'pending' && !offer.tool.readOnly && level === 'supervised')
    return lease.save({
      ...RELEASED,
      status: 'requires_approval',
      steps: withStep(run.steps, step.index, { status: 'requires_approval' }),
      budgetLeftMs: budgetLeftMs(),
    });
  const outcome = await callTool(rt, offer, step.arguments ?? {}, { token }, signal);
  return lease.save({
    steps: withStep(lease.run.steps, step.index, { ...outcome, completedAt: nowIso() }),
    budgetLeftMs: budgetLeftMs(),
  });
}
