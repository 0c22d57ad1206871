/**
 * The deployments an agent's model calls may go to (CONTRACT.md 12): the catalogue entries of the agent's `model`
 * when it names a catalogue name (spread by weight, then the tenant's fallbacks); otherwise, as before the catalogue,
 * the tenant's default model with the agent's `model` in place of its model, then its fallbacks. Resolved at execute
 * (for the first call's hold) and again when the run's loop starts (keys read at call time).
 */
import { isAppError, newId, type ServiceClient } from '@svc/kit';
import { boundPlan, type CallPlan, llmCandidatesFrom, type LlmSettings, planCall, type PricingSettings } from '@svc/llm';
import type { identityV1 } from '@svc/proto';
import type { RunCall } from './collections';

export interface AgentModels {
  plan: CallPlan;
  /** tenant or platform: whose key pays for the default model ('tenant' for catalogue entries). */
  keySource: string;
}

export class LlmNotConfigured extends Error {}

export async function agentModels(
  identity: ServiceClient<typeof identityV1.IdentityServiceService>,
  call: { token: string; requestId?: string },
  agentModel: string | undefined,
  settings: { pricing: PricingSettings; defaultMaxTokens: number; extra?: Partial<LlmSettings> },
): Promise<AgentModels> {
  const [resolved, catalogue] = await Promise.all([
    identity.resolveLlmSettings({}, call).then(
      (r) => r.settings ?? null,
      (err: unknown) => {
        if (isAppError(err) && err.details.reason === 'llm_not_configured') return null;
        throw err;
      },
    ),
    agentModel ? identity.resolveModels({ name: agentModel }, call) : { models: [] },
  ]);
  if (!resolved && catalogue.models.length === 0) throw new LlmNotConfigured('llm_not_configured: no LLM is configured for this tenant');
  const defaults = resolved ? llmCandidatesFrom(resolved, settings.extra) : [];
  // Not a catalogue name: the agent's own model replaces the default model's (its fallbacks keep theirs).
  if (catalogue.models.length === 0 && agentModel) defaults[0] = { ...defaults[0], model: agentModel };
  const name = catalogue.models.length ? agentModel! : (defaults[0].model ?? '');
  const plan = planCall(
    name,
    catalogue.models,
    defaults.map((d) => ({ ...settings.extra, ...d })),
    settings.pricing,
  );
  return {
    plan: boundPlan(plan, { maxTokens: resolved?.maxTokens ?? settings.defaultMaxTokens }),
    keySource: catalogue.models.length ? 'tenant' : (resolved?.source ?? 'tenant'),
  };
}

/** A new call's record before it is served: the plan's first deployment, replaced by the one that serves. */
export function firstCallOf(plan: CallPlan, keySource: string, promptChars: number): RunCall {
  const first = plan.primary[0];
  return {
    id: newId('call'),
    promptTokens: Math.ceil(promptChars / 4),
    streamed: 0,
    usage: null,
    provider: first.settings.provider,
    model: first.settings.model ?? '',
    keySource,
    name: plan.name,
    entryId: first.meta.entryId,
    price: first.meta.price,
  };
}
