/**
 * What billing takes from the bus: `tenant.created` (identity) grants the starting credits; `llm.usage` (agents and
 * chat, one event per model call) spends them. Both apply once per source (the ledger's unique key), so the bus's
 * at-least-once redeliveries change nothing.
 */
import { nowIso, type Logger, type ReceivedMessage, type Store, type StoreSession } from '@svc/kit';
import { decodeDomainEvent } from '@svc/contracts';
import type { eventsV1 } from '@svc/proto';
import { keySpendApplied } from './alerts';
import { usageStats } from './collections';
import { addToCounter } from './counters';
import { recordKeyUsage } from './key-usage';
import { addEntry, applyOnce } from './ledger';
import { spendEscrow } from './escrows';
import { closeReservation, validModelPrice } from './reservations';
import { usageCost } from '@svc/llm/pricing';
import { logCall, logReleasedCall, requestLogEntry, requestLogId } from './request-log';
import { recordUsageRollups } from './usage-analytics';

const TYPES = new Set(['tenant.created', 'llm.usage']);

export interface UsageSettings {
  creditsPer1kTokens: number;
  startingGrant: number;
}

/**
 * A tenant's starting grant, once (its ledger source is the tenant): applied by `tenant.created`, or by the tenant's
 * first call to billing when that comes first (the event is still on its way, e.g. a Kafka consumer catching up),
 * so a tenant never meets a 402 in its first seconds. The caller's token, signed by identity, proves the tenant.
 */
export async function grantStartingCredits(store: Store, tenantId: string, credits: number): Promise<void> {
  await applyOnce(store, (tx) =>
    addEntry(tx, { tenantId, sourceKey: `grant:${tenantId}`, kind: 'grant', credits, description: 'Starting grant' }),
  );
}

export function billingEventHandler(store: Store, settings: UsageSettings, logger: Logger) {
  return async (message: ReceivedMessage): Promise<void> => {
    const headerType = message.headers['event-type'];
    if (headerType !== undefined && !TYPES.has(headerType)) return; // skipped without decoding
    const event = decodeDomainEvent(message.value);
    if (!event.tenantId) return;
    if (event.type === 'tenant.created') {
      await grantStartingCredits(store, event.tenantId, settings.startingGrant);
      return;
    }
    if (event.type !== 'llm.usage' || event.data?.$case !== 'usage') return;
    const credits = await applyUsage(store, settings.creditsPer1kTokens, event.tenantId, event.data.value, event.id);
    logger.debug({ eventId: event.id, tenantId: event.tenantId, credits }, 'usage applied');
  };
}

/**
 * One model call's usage into the ledger (an `llm.usage` event, or a call the gateway recorded itself): once per
 * call id, settling its reservation; a call with no tokens releases its reservation instead. Returns the credits
 * debited by this application (0 when it had been applied before).
 */
export async function applyUsage(store: Store, per1k: number, tenantId: string, u: eventsV1.UsageData, eventId: string): Promise<number> {
  // A price nobody could have meant (negative, not a number) is not applied: the call is billed at the default.
  const price = u.price && validModelPrice(u.price) === null ? u.price : undefined;
  const cachedInputTokens = Math.min(Math.max(0, u.cachedInputTokens ?? 0), Math.max(0, u.inputTokens));
  // Computed as chat's escrow computes what the call spent of it (usageCost).
  const credits = usageCost({ ...u, price }, per1k);
  // A call with nothing to bill (it never reached the model, or produced nothing): its reservation is given back,
  // and the request log keeps the call when its sender described it (an error or a cancel, 0 credits).
  if (u.callId && u.inputTokens + u.outputTokens <= 0) {
    if (!u.call) {
      await store.transaction((tx) => closeReservation(tx, tenantId, u.callId, 'released'));
      return 0;
    }
    const entry = { id: requestLogId(tenantId, `release:${u.callId}`), tenantId, credits: 0, defaultStatus: 'error' as const };
    await applyOnce(store, async (tx) => {
      await closeReservation(tx, tenantId, u.callId, 'released');
      await logReleasedCall(tx, requestLogEntry(u, { ...entry, at: nowIso() }));
    });
    return 0;
  }
  const sourceKey = u.callId ? `usage:call:${u.callId}` : `usage:${eventId}`;
  return applyOnce(store, async (tx) => {
    // Settles the call's reservation with its usage, once per call: whoever reports the call (its generator, or a
    // sweep of what was recorded after a crash) and however often, the ledger's source is the call.
    // A call carved from an escrow has no reservation of its own: its cost comes out of the escrow below, once.
    if (u.callId && !u.escrowId) await closeReservation(tx, tenantId, u.callId, 'settled');
    const applied = await addEntry(tx, {
      tenantId,
      sourceKey,
      kind: 'usage',
      credits: -credits,
      description: `${u.inputTokens + u.outputTokens} tokens, ${u.model} (${u.source} ${u.sourceId})`,
      usage: {
        // The model as the caller asked for it (CONTRACT.md 12): usage analytics group by it.
        model: u.model,
        apiKeyId: u.credentialType === 'api_key' ? u.credentialId : '',
        projectId: u.projectId,
        agentId: u.agentId,
        inputTokens: u.inputTokens,
        outputTokens: u.outputTokens,
        ...(cachedInputTokens ? { cachedInputTokens } : {}),
        provider: u.provider,
        ...(u.call?.entryId ? { entryId: u.call.entryId } : {}),
        ...(u.call?.servedModel ? { servedModel: u.call.servedModel } : {}),
        price: price
          ? { input: price.input, output: price.output, cachedInput: price.cachedInput, source: price.source || 'entry' }
          : { input: per1k * 1000, output: per1k * 1000, cachedInput: per1k * 1000, source: 'default' },
      },
    });
    if (!applied) return 0;
    if (u.escrowId) await spendEscrow(tx, tenantId, u.escrowId, credits);
    // The entry applied once (its source is unique): the call's log entry is one insert beside it, nothing read.
    const at = applied.entry.createdAt;
    await logCall(tx, requestLogEntry(u, { id: requestLogId(tenantId, sourceKey), tenantId, at, credits, defaultStatus: 'ok' }));
    await recordUsageRollups(tx, applied.entry);
    const line = { calls: 1, inputTokens: u.inputTokens, outputTokens: u.outputTokens, credits };
    await addUsage(tx, tenantId, 'model', u.model, '', line);
    await addUsage(tx, tenantId, 'credential', u.credentialId || 'unknown', u.credentialType || '', line);
    if (u.credentialType === 'api_key' && u.credentialId) {
      await recordKeyUsage(tx, tenantId, u.credentialId, u.inputTokens + u.outputTokens, credits);
      await keySpendApplied(tx, tenantId, u.credentialId, u.callId, credits);
    }
    return credits;
  });
}

type Line = { calls: number; inputTokens: number; outputTokens: number; credits: number };

/** Running totals per tenant and model / credential, moved with the usage entry (the summary reads them). */
async function addUsage(tx: StoreSession, tenantId: string, group: 'model' | 'credential', key: string, kind: string, line: Line) {
  const col = tx.collection(usageStats);
  const id = `${tenantId}|${group}|${key}`;
  await addToCounter(col, id, line, () => ({
    id,
    tenantId,
    group,
    key,
    kind,
    calls: 0,
    inputTokens: 0,
    outputTokens: 0,
    credits: 0,
    createdAt: nowIso(),
  }));
}
