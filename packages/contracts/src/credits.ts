import { billingV1, type eventsV1 } from '@svc/proto';
import { createClient, metrics, type ServiceClient } from '@svc/kit';

/** A call's output bound when the tenant set none (LLM_MAX_TOKENS): its reservation counts it, the provider gets it. */
export const DEFAULT_LLM_MAX_TOKENS = 1024;

/**
 * A model call's most possible tokens (CONTRACT.md 8): its prompt at 4 characters a token plus its max tokens.
 * Billing prices them as usage.
 */
export function reservationTokens(promptChars: number, maxTokens: number): number {
  return Math.ceil(Math.max(0, promptChars) / 4) + Math.max(0, maxTokens);
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
    const end = metrics.reservations.startTimer();
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

  close(): void {
    this.client.close();
  }
}
