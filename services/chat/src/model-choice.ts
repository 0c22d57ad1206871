/**
 * Which deployments a chat call may go to (CONTRACT.md 12): a catalogue name's enabled entries (spread by weight,
 * then the tenant's fallbacks), else the tenant's default model (its LLM settings) and its fallbacks. Resolved at
 * call time from peers' short-lived caches.
 */
import { AppError, type AuthedContext, isAppError } from '@svc/kit';
import { type CallHold, pricedHold } from '@svc/contracts';
import { type CallPlan, planCall, planHold, type PricingSettings, type ResolvedCatalogueEntry } from '@svc/llm';
import type { ReplyCall } from './collections';
import type { Peers } from './peers';
import type { ReplyLlm } from './replies';

export function modelNotFound(model: string): AppError {
  return new AppError('RESOURCE_NOT_FOUND', `The model '${model}' does not exist or you do not have access to it`, {
    resource: 'model',
    id: model,
    reason: 'model_not_found',
    param: 'model',
  });
}

const notConfigured = (err: unknown) => isAppError(err) && err.details?.reason === 'llm_not_configured';

/** The tenant's LLM settings, or null when it has none (and the platform none): a catalogue name still works. */
export async function defaultLlm(peers: Peers, token: string, tenantId: string): Promise<ReplyLlm | null> {
  return peers.llm(token, tenantId).catch((err: unknown) => {
    if (notConfigured(err)) return null;
    throw err;
  });
}

/** The default model's settings, then its fallbacks ([] when the tenant has none). */
const defaultsOf = (llm: ReplyLlm | null) => (llm ? [llm.settings, ...(llm.fallbacks ?? [])] : []);

/** The default model and its fallbacks as a plan, asked for as `name` (the default model's name). */
export function defaultPlan(llm: ReplyLlm, pricing: PricingSettings, name = llm.settings.model ?? ''): CallPlan {
  return planCall(name, [], defaultsOf(llm), pricing);
}

/** The plan of a call to a catalogue name's entries, with the default model's fallbacks after them. */
export function cataloguePlan(name: string, entries: ResolvedCatalogueEntry[], llm: ReplyLlm | null, pricing: PricingSettings): CallPlan {
  return planCall(name, entries, defaultsOf(llm), pricing);
}

/**
 * A REST chat call's plan: `name` (a message's or its session's `model`) must be a catalogue name or the default
 * model's (else 404 model_not_found); none: the default model, with an agent's own model in its place. The LLM
 * settings' refusal (llm_not_configured) stands when the call needs the default model.
 */
export async function restPlan(
  peers: Peers,
  token: string,
  tenantId: string,
  pricing: PricingSettings,
  name: string,
  agentModel: string,
): Promise<{ plan: CallPlan; llm: ReplyLlm | null }> {
  const wanted = name || agentModel;
  const [llm, entries] = await Promise.all([defaultLlm(peers, token, tenantId), wanted ? peers.catalogue(token, tenantId, wanted) : []]);
  if (entries.length) return { plan: cataloguePlan(wanted, entries, llm, pricing), llm };
  if (name && name !== llm?.settings.model) throw modelNotFound(name);
  if (!llm) await peers.llm(token, tenantId); // throws llm_not_configured
  const settings = { ...llm!.settings, ...(agentModel && !name ? { model: agentModel } : {}) };
  return { plan: defaultPlan({ ...llm!, settings }, pricing), llm };
}

/** The reservation of a call on `plan`: its prompt and largest output bound at the dearest price that may serve it. */
export function holdOf(callId: string, plan: CallPlan, promptChars: number): CallHold {
  return pricedHold({ callId, source: 'chat_reply', sourceId: callId, model: plan.name }, promptChars, planHold(plan));
}

/** Who and what a call is for, as the request log keeps it. */
export interface CallOrigin {
  origin: 'chat' | 'v1';
  requestId: string;
  endUser: string;
}

/** A reply's call record before it is served: the plan's first deployment, replaced by the one that serves. */
export function replyCall(
  c: AuthedContext,
  plan: CallPlan,
  keySource: string,
  fields: { promptChars: number; projectId: string; agentId: string } & CallOrigin,
): ReplyCall {
  const first = plan.primary[0];
  return {
    provider: first.settings.provider,
    model: first.settings.model ?? '',
    keySource,
    credentialId: c.auth.sid ?? '',
    credentialType: c.auth.typ ?? '',
    promptTokens: Math.ceil(fields.promptChars / 4),
    projectId: fields.projectId,
    agentId: fields.agentId,
    name: plan.name,
    entryId: first.meta.entryId,
    price: first.meta.price,
    origin: fields.origin,
    requestId: fields.requestId,
    endUser: fields.endUser.slice(0, 200),
    userId: c.auth.sub, // a key's token carries its creator
  };
}
