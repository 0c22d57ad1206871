/**
 * A model call as chat and agents plan it (CONTRACT.md 12): the deployments that may serve it (a catalogue name's
 * enabled entries, or the tenant's default model), then the default model's fallbacks, each with its price and the
 * catalogue entry it came from; one reservation covers whichever of them serves.
 */
import type { ModelPrice, PricingSettings } from './pricing';
import { defaultPrice, resolvePrice } from './pricing';
import { routeByName, type RouteOptions, type RoutedCall } from './router';
import type { ModelChainOptions } from './fallback';
import type { LlmSettings } from './types';

/** Identity's resolved catalogue entry (ResolveModels), as its fields arrive. */
export interface ResolvedCatalogueEntry {
  id: string;
  name: string;
  provider: string;
  upstreamModel: string;
  baseUrl: string;
  apiKey: string;
  apiVersion: string;
  region: string;
  weight: number;
  price?: { input: number; output: number; cachedInput: number; source: string };
  maxOutputTokens?: number;
}

/** What a candidate of a call is, for its bill: the catalogue entry ('' for the default model and its fallbacks). */
export interface CandidateMeta {
  entryId: string;
  price: ModelPrice;
}

export interface PlannedCandidate {
  weight: number;
  settings: LlmSettings;
  meta: CandidateMeta;
}

/** The deployments one call may go to, in their groups. */
export interface CallPlan {
  /** The model as the caller asked for it (a catalogue name, or the default model's name). */
  name: string;
  /** Spread by weight: a name's entries, or the default model alone. */
  primary: PlannedCandidate[];
  /** Tried in order after every primary one failed before its first token. */
  fallbacks: PlannedCandidate[];
}

/** A catalogue entry as provider settings (`apiVersion` and `region` only where the entry has them). */
export function catalogueCandidate(e: ResolvedCatalogueEntry, pricing: PricingSettings): PlannedCandidate {
  const settings: LlmSettings = {
    provider: e.provider as LlmSettings['provider'],
    model: e.upstreamModel,
    baseUrl: e.baseUrl || undefined,
    apiKey: e.apiKey || undefined,
    ...(e.maxOutputTokens ? { maxTokens: e.maxOutputTokens } : {}),
    ...(e.apiVersion ? { apiVersion: e.apiVersion } : {}),
    ...(e.region ? { region: e.region } : {}),
  };
  const price: ModelPrice = e.price
    ? { input: e.price.input, output: e.price.output, cachedInput: e.price.cachedInput, source: e.price.source as ModelPrice['source'] }
    : resolvePrice({ provider: e.provider, upstreamModel: e.upstreamModel, baseUrl: e.baseUrl || undefined }, pricing);
  return { weight: Math.max(1, e.weight), settings, meta: { entryId: e.id, price } };
}

/**
 * The default model (or one of its fallbacks) as a candidate. It keeps CONTRACT.md 5's flat CREDITS_PER_1K_TOKENS:
 * per-model prices (an entry's own, or the platform list's) come with catalogue entries (section 12), so a tenant that
 * only set its LLM settings is billed as before (decision 91).
 */
export function settingsCandidate(settings: LlmSettings, pricing: PricingSettings): PlannedCandidate {
  return { weight: 1, settings, meta: { entryId: '', price: defaultPrice(pricing) } };
}

/**
 * A call to `name`: its catalogue entries when the catalogue has any (spread by weight), else the default model
 * (`defaults[0]`); then the default model's fallbacks (`defaults` after the first). `defaults` is empty for a tenant
 * without LLM settings (a catalogue name still works there).
 */
export function planCall(
  name: string,
  entries: ReadonlyArray<ResolvedCatalogueEntry>,
  defaults: ReadonlyArray<LlmSettings>,
  pricing: PricingSettings,
): CallPlan {
  const primary = entries.length
    ? entries.map((e) => catalogueCandidate(e, pricing))
    : defaults.slice(0, 1).map((s) => settingsCandidate(s, pricing));
  return { name, primary, fallbacks: defaults.slice(1).map((s) => settingsCandidate(s, pricing)) };
}

/**
 * Every candidate's temperature and output bound for this call: a catalogue entry keeps its own `maxOutputTokens`
 * (lowered to `maxTokens` when the caller asked for less: `callerBound`), others take `maxTokens`; `temperature`
 * applies to all.
 */
export function boundPlan(plan: CallPlan, bounds: { maxTokens: number; temperature?: number; callerBound?: boolean }): CallPlan {
  const own = (c: PlannedCandidate) => (c.meta.entryId ? c.settings.maxTokens : undefined);
  const bound = (c: PlannedCandidate): PlannedCandidate => ({
    ...c,
    settings: {
      ...c.settings,
      maxTokens: own(c) === undefined ? bounds.maxTokens : bounds.callerBound ? Math.min(own(c)!, bounds.maxTokens) : own(c),
      ...(bounds.temperature !== undefined ? { temperature: bounds.temperature } : {}),
    },
  });
  return { ...plan, primary: plan.primary.map(bound), fallbacks: plan.fallbacks.map(bound) };
}

/** What a call's reservation holds: the most costly price and the largest output bound among its candidates. */
export function planHold(plan: CallPlan): { price: ModelPrice; outputTokens: number } {
  const all = [...plan.primary, ...plan.fallbacks];
  const max = (f: (c: PlannedCandidate) => number) => Math.max(0, ...all.map(f));
  return {
    price: {
      input: max((c) => c.meta.price.input),
      output: max((c) => c.meta.price.output),
      cachedInput: max((c) => c.meta.price.cachedInput),
      source: plan.primary[0]?.meta.price.source ?? 'default',
    },
    outputTokens: max((c) => c.settings.maxTokens ?? 0),
  };
}

/** The plan as one model chain (routeByName), and the meta of the candidate at a ServedModel index. */
export function routePlan(
  plan: CallPlan,
  options: RouteOptions & Omit<ModelChainOptions, 'breaker' | 'scope'>,
  extra: Partial<LlmSettings> = {},
): RoutedCall<CandidateMeta> & { metaOf(index: number): CandidateMeta } {
  const routed = routeByName(
    plan.primary,
    plan.fallbacks.map((f) => f.settings),
    options,
    extra,
  );
  const n = plan.primary.length;
  return { ...routed, metaOf: (i) => (i < n ? routed.metaAt(i)! : plan.fallbacks[i - n].meta) };
}
