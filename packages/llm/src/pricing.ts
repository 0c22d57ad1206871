/**
 * What a model call costs, in credits per 1,000,000 tokens (CONTRACT.md 12): the catalogue entry's own price, else the
 * platform's price for its provider and upstream model from a maintained price list (`@pydantic/genai-prices`, in USD,
 * times CREDITS_PER_USD), else the flat CREDITS_PER_1K_TOKENS. Identity shows it on the catalogue; the callers
 * (chat, agents, the gateway's pass-through) resolve it at call time and hand it to billing with the reservation and
 * the usage, so the hold and the debit use the same price.
 */
import type { ModelPrice as ListedPrice } from '@pydantic/genai-prices';

/** The list is ~0.5 MB of data (60 ms to load): loaded at the first price asked, not at every process's start. */
function priceList(): typeof import('@pydantic/genai-prices') {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load (decision 85)
  return require('@pydantic/genai-prices') as typeof import('@pydantic/genai-prices');
}

export type PriceSource = 'entry' | 'platform' | 'default';

export interface ModelPrice {
  /** Credits per 1,000,000 input tokens (the uncached ones). */
  input: number;
  /** Credits per 1,000,000 output tokens. */
  output: number;
  /** Credits per 1,000,000 input tokens read from the provider's prompt cache. */
  cachedInput: number;
  source: PriceSource;
}

export interface PricingSettings {
  /** CREDITS_PER_USD (default 1000). */
  creditsPerUsd: number;
  /** CREDITS_PER_1K_TOKENS (default 1): the price of a model nobody priced. */
  creditsPer1kTokens: number;
}

export interface PricedModel {
  provider: string;
  /** The provider's model id. */
  upstreamModel: string;
  baseUrl?: string;
  /** The entry's own price; `cachedInput` defaults to `input`. */
  price?: { input: number; output: number; cachedInput?: number } | null;
}

/** The price list's provider id for ours; `openai-compatible` is matched by its base URL (Groq, OpenRouter...). */
const LIST_PROVIDER: Record<string, string> = {
  openai: 'openai',
  anthropic: 'anthropic',
  'azure-openai': 'azure',
  gemini: 'google',
  bedrock: 'aws',
};

export function defaultPrice(settings: Pick<PricingSettings, 'creditsPer1kTokens'>): ModelPrice {
  const perMillion = settings.creditsPer1kTokens * 1000;
  return { input: perMillion, output: perMillion, cachedInput: perMillion, source: 'default' };
}

/** A listed price in USD per million tokens: tiered prices (long-context tiers) are taken at their base. */
function usdPerMillion(value: ListedPrice[string]): number | undefined {
  if (typeof value === 'number') return value;
  if (value && typeof value === 'object' && 'base' in value && typeof value.base === 'number') return value.base;
  return undefined;
}

const listCache = new Map<string, ModelPrice | null>();

/** The platform's price for a provider's model, or null when the list does not know it. Memoised per model. */
export function platformPrice(
  provider: string,
  upstreamModel: string,
  baseUrl: string | undefined,
  creditsPerUsd: number,
): ModelPrice | null {
  const cacheKey = `${provider}|${upstreamModel}|${provider === 'openai-compatible' ? (baseUrl ?? '') : ''}|${creditsPerUsd}`;
  const cached = listCache.get(cacheKey);
  if (cached !== undefined) return cached;
  const providerId = LIST_PROVIDER[provider];
  const options = providerId ? { providerId } : baseUrl ? { providerApiUrl: baseUrl } : undefined;
  let price: ModelPrice | null = null;
  if (options) {
    const found = priceList().calcPrice({ input_tokens: 1, output_tokens: 1 }, upstreamModel, options);
    const input = found ? usdPerMillion(found.model_price.input_mtok) : undefined;
    const output = found ? usdPerMillion(found.model_price.output_mtok) : undefined;
    if (found && (input !== undefined || output !== undefined)) {
      const cachedInput = usdPerMillion(found.model_price.cache_read_mtok) ?? input ?? 0;
      price = {
        input: (input ?? 0) * creditsPerUsd,
        output: (output ?? 0) * creditsPerUsd,
        cachedInput: cachedInput * creditsPerUsd,
        source: 'platform',
      };
    }
  }
  if (listCache.size > 10_000) listCache.clear(); // bounded: model names come from tenants
  listCache.set(cacheKey, price);
  return price;
}

/** The price a call on this model is billed at, and where it came from. */
export function resolvePrice(model: PricedModel, settings: PricingSettings): ModelPrice {
  if (model.price) {
    const { input, output, cachedInput } = model.price;
    return { input, output, cachedInput: cachedInput ?? input, source: 'entry' };
  }
  return platformPrice(model.provider, model.upstreamModel, model.baseUrl, settings.creditsPerUsd) ?? defaultPrice(settings);
}

/**
 * A call's credits (CONTRACT.md 12): ceil((uncached input × input + output × output + cached input × cachedInput) /
 * 1,000,000). `inputTokens` counts every input token, cached ones included, as providers report it.
 */
export function callCredits(
  usage: { inputTokens: number; outputTokens: number; cachedInputTokens?: number },
  price: Omit<ModelPrice, 'source'>,
): number {
  const cached = Math.min(Math.max(0, usage.cachedInputTokens ?? 0), Math.max(0, usage.inputTokens));
  const uncached = Math.max(0, usage.inputTokens) - cached;
  const micro = uncached * price.input + Math.max(0, usage.outputTokens) * price.output + cached * price.cachedInput;
  // A float product such as 3 × 0.1 is 0.30000000000000004: a whole number of credits must not round up past itself.
  return micro <= 0 ? 0 : Math.ceil(micro / 1_000_000 - 1e-9);
}

const MAX_PRICE = 1e9;
const validPriceNumber = (n: number) => Number.isFinite(n) && n >= 0 && n <= MAX_PRICE;

/** A price as callers send it, or why not: credits per million tokens, each 0 to 1e9. */
export function invalidPrice(price: Omit<ModelPrice, 'source'> | undefined): string | null {
  if (price && ![price.input, price.output, price.cachedInput].every(validPriceNumber))
    return `price must be 0 to ${MAX_PRICE} per million tokens`;
  return null;
}

/** Tokens at the flat price: CREDITS_PER_1K_TOKENS per 1,000, rounded up per call. */
export function flatCredits(tokens: number, per1k: number): number {
  return Math.ceil((Math.max(0, tokens) * per1k) / 1000);
}

/**
 * What billing debits for a call's usage, computed alike wherever it is needed (billing's settle, and chat's escrow,
 * which must know exactly what each call spent of it): at the call's price when it is a valid one, else the flat price.
 */
export function usageCost(
  u: { inputTokens: number; outputTokens: number; cachedInputTokens?: number; price?: Omit<ModelPrice, 'source'> },
  per1k: number,
): number {
  const price = u.price && invalidPrice(u.price) === null ? u.price : undefined;
  const cachedInputTokens = Math.min(Math.max(0, u.cachedInputTokens ?? 0), Math.max(0, u.inputTokens));
  return price
    ? callCredits({ inputTokens: u.inputTokens, outputTokens: u.outputTokens, cachedInputTokens }, price)
    : flatCredits(Math.max(0, u.inputTokens) + Math.max(0, u.outputTokens), per1k);
}

/** The credits a call's hold is: its bounds at its price, else its tokens at the flat price (CONTRACT.md 8). */
export function holdCost(
  hold: { tokens: number; price?: Omit<ModelPrice, 'source'>; inputTokens?: number; outputTokens?: number },
  per1k: number,
): number {
  if (!hold.price) return flatCredits(hold.tokens, per1k);
  return callCredits({ inputTokens: hold.inputTokens ?? 0, outputTokens: hold.outputTokens ?? 0 }, hold.price);
}
