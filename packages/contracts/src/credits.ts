import { billingV1, type eventsV1 } from '@svc/proto';
import { createClient, type ServiceClient } from '@svc/kit';
import { domainMetrics } from './metrics';

/** A call's output bound when the tenant set none (LLM_MAX_TOKENS): its reservation counts it, the provider gets it. */
export const DEFAULT_LLM_MAX_TOKENS = 1024;

/**
 * A model call's most possible tokens (CONTRACT.md 8): its prompt at 4 characters a token plus its max tokens.
 * Billing prices them as usage.
 */
export function reservationTokens(promptChars: number, maxTokens: number): number {
  return Math.ceil(Math.max(0, promptChars) / 4) + Math.max(0, maxTokens);
}

/** Prompts up to this many UTF-8 bytes are tokenized; larger ones are bounded by their bytes (see promptTokenBound). */
export const TOKENIZE_MAX_BYTES = 1024;
/** A pre-tokenized piece longer than this counts as its bytes: BPE merging is quadratic in a piece's length. */
const TOKENIZE_MAX_PIECE = 16;

interface Tokenizer {
  countTokens(text: string): number;
  split: RegExp;
}

const tokenizers = new Map<string, Tokenizer | null>();

/** The byte-level BPE encoding of an OpenAI model, by gpt-tokenizer's own map, else o200k_base for the newer families. */
function encodingOf(model: string): 'o200k_base' | 'cl100k_base' | null {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- lazy: a small map, loaded with the first prompt bounded
  const { modelToEncodingMap } = require('gpt-tokenizer/mapping') as { modelToEncodingMap: Record<string, string | undefined> };
  const listed = modelToEncodingMap[model];
  if (listed === 'o200k_base' || listed === 'cl100k_base') return listed;
  if (listed) return null;
  if (/^(gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|chatgpt-|o[1-9](-|$)|gpt-oss)/.test(model)) return 'o200k_base';
  if (/^(gpt-4|gpt-3\.5|text-embedding-3|text-embedding-ada)/.test(model)) return 'cl100k_base';
  return null;
}

/** The tokenizer of a model whose tokenizer is known (OpenAI's), loaded at its first use (~0.5-1.5 s), else null. */
function tokenizerOf(model: string): Tokenizer | null {
  const name = encodingOf(model);
  if (!name) return null;
  let found = tokenizers.get(name);
  if (found === undefined) {
    /* eslint-disable @typescript-eslint/no-require-imports -- deliberate lazy load: megabytes of ranks, start-up time matters */
    const encoding = require(`gpt-tokenizer/encoding/${name}`) as { countTokens(text: string): number };
    const params = require('gpt-tokenizer/encodingParams/constants') as Record<string, RegExp>;
    /* eslint-enable @typescript-eslint/no-require-imports */
    const split = name === 'o200k_base' ? params.O200K_TOKEN_SPLIT_REGEX : params.CL100K_TOKEN_SPLIT_REGEX;
    found = split ? { countTokens: encoding.countTokens, split: new RegExp(split.source, split.flags) } : null;
    tokenizers.set(name, found);
  }
  return found;
}

/**
 * An upper bound on a prompt's tokens, for a reservation that must be the call's most possible cost (CONTRACT.md 8).
 * Every byte-level BPE token covers at least one UTF-8 byte, so the bytes bound any model's tokens (60k CJK
 * characters are 180k bytes; they are ~67k tokens, not the 15k that 4 characters a token would hold). For a model
 * whose tokenizer is known (OpenAI's) and a prompt of at most TOKENIZE_MAX_BYTES, the tokenizer counts it, piece by
 * piece of its own pre-tokenizer, a piece longer than 16 characters counting as its bytes. The caps are measured
 * (docs/decisions.md, holes): gpt-tokenizer's BPE is quadratic in a piece's length (1,000 CJK characters without a
 * space take ~0.3 s whole) and costs up to ~50 µs a byte on text its merge cache misses (random base64, rare CJK),
 * so at most 1 KiB is tokenized and a larger prompt costs one O(n) Buffer.byteLength (0.2 ms a MiB).
 */
export function promptTokenBound(text: string, model = ''): number {
  const bytes = Buffer.byteLength(text, 'utf8');
  if (bytes === 0 || bytes > TOKENIZE_MAX_BYTES) return bytes;
  const tokenizer = model ? tokenizerOf(model) : null;
  if (!tokenizer) return bytes;
  let tokens = 0;
  for (const [piece] of text.matchAll(tokenizer.split))
    tokens += piece.length <= TOKENIZE_MAX_PIECE ? tokenizer.countTokens(piece) : Buffer.byteLength(piece, 'utf8');
  return Math.min(tokens, bytes);
}

export interface CallHold {
  /** The caller's id of the model call: its `llm.usage` event carries it (the settle), and a retry reuses it. */
  callId: string;
  tokens: number;
  source: 'agent_run' | 'chat_reply';
  sourceId: string;
  /**
   * With a price (CONTRACT.md 12): the hold is `inputTokens` (the prompt's bound) and `outputTokens` (the output bound)
   * at that price, and `tokens` is ignored. Without: `tokens` at the default price.
   */
  price?: eventsV1.ModelPrice;
  inputTokens?: number;
  outputTokens?: number;
  /** The model as the caller asked for it (a catalogue name, or the default model's name). */
  model?: string;
}

/**
 * A model call's hold at a price (CONTRACT.md 8, 12): its prompt at 4 characters a token and its output bound, at the
 * price of the dearest deployment that may serve it (`tokens` too, for a billing that prices alike).
 */
export function pricedHold(
  call: Pick<CallHold, 'callId' | 'source' | 'sourceId' | 'model'>,
  promptChars: number,
  bound: { price: eventsV1.ModelPrice; outputTokens: number },
): CallHold {
  return {
    ...call,
    tokens: reservationTokens(promptChars, bound.outputTokens),
    price: bound.price,
    inputTokens: Math.ceil(Math.max(0, promptChars) / 4),
    outputTokens: bound.outputTokens,
  };
}

/**
 * Billing's reservations, as agents and chat use them (CONTRACT.md 8): before a model call, `reserve` holds its most
 * possible cost against the tenant's available credits, in billing's store, so the 402 INSUFFICIENT_CREDITS is exact
 * on every replica from the moment the balance changes (no cached balance). The call's `llm.usage` event settles it;
 * `release` gives back the hold of a call that never started. Billing not answering refuses the call (503): a
 * call is never started on credit nobody checked.
 */
export class CreditReservations {
  private readonly client: ServiceClient<typeof billingV1.BillingServiceService>;

  constructor(address: string, deadlineMs = 1000) {
    this.client = createClient(billingV1.BillingServiceService, address, { deadlineMs });
  }

  /** Throws AppError INSUFFICIENT_CREDITS (402) when the call does not fit in the tenant's available credits. */
  async reserve(token: string, hold: CallHold): Promise<{ status: string; available: number }> {
    const end = domainMetrics.reservations.startTimer();
    try {
      const res = await this.client.reserve({ ...hold, ttlMs: 0 }, { token });
      end({ outcome: 'accepted' });
      return { status: res.status, available: res.available };
    } catch (err) {
      end({ outcome: (err as { code?: string }).code === 'INSUFFICIENT_CREDITS' ? 'refused' : 'error' });
      throw err;
    }
  }

  async release(token: string, callId: string): Promise<void> {
    await this.client.release({ callId }, { token });
  }

  /** A slice of the caller's tenant's credits for this process (billing escrows.ts); `granted` false: reserve per call. */
  grantEscrow(token: string, req: billingV1.GrantEscrowRequest): Promise<billingV1.GrantEscrowResponse> {
    return this.client.grantEscrow(req, { token });
  }

  /** Renews an escrow's lease, giving back `returnCredits` of it; `close` ends this process's use of it. */
  renewEscrow(token: string, req: billingV1.RenewEscrowRequest): Promise<billingV1.RenewEscrowResponse> {
    return this.client.renewEscrow(req, { token });
  }

  close(): void {
    this.client.close();
  }
}
