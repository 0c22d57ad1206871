/**
 * What billing takes from the bus: `tenant.created` (identity) grants the starting credits; `llm.usage` (agents and
 * chat, one event per model call) spends them. Both apply once per source (the ledger's unique key), so the bus's
 * at-least-once redeliveries change nothing.
 */
import { nowIso, type Logger, type ReceivedMessage, type Store, type StoreSession } from '@svc/kit';
import { decodeDomainEvent } from '@svc/contracts';
import type { eventsV1 } from '@svc/proto';
import { usageStats } from './collections';
import { addEntry, applyOnce, tallyEntry } from './ledger';
import { spendEscrow } from './escrows';
import { closeReservation, validModelPrice } from './reservations';
import { usageCost } from '@svc/llm/pricing';
import { logCall, logReleasedCall, requestLogEntry, requestLogId } from './request-log';
import { recordUsageRollups } from './usage-analytics';
import { Tally } from './tally';

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
  await applyOnce(store, (tx) => addEntry(tx, startingGrant(tenantId, credits)));
}

function startingGrant(tenantId: string, credits: number) {
  return { tenantId, sourceKey: `grant:${tenantId}`, kind: 'grant' as const, credits, description: 'Starting grant' };
}

/** A message's writes in the caller's transaction, its counters moved in `tally` (flushed by the caller). */
type Write<R = unknown> = (tx: StoreSession, tally: Tally) => Promise<R>;

/** Runs `writes` in one transaction (applyOnce's: all again after a duplicate key), the counters written once at the end. */
async function applyAll<R>(store: Store, writes: Array<Write<R>>): Promise<R[]> {
  return applyOnce(store, async (tx) => {
    const tally = new Tally(tx);
    const results: R[] = [];
    for (const [i, write] of writes.entries()) {
      results.push(await write(tx, tally));
      // The account and key documents the event moved first are written now, the rest at the flush (tally.ts).
      if (i < writes.length - 1) await tally.hold();
    }
    await tally.flush();
    return results;
  });
}

/** What one bus message writes in billing's store (null: nothing, it is not billing's); throws on a poison message. */
function eventWrite(message: ReceivedMessage, settings: UsageSettings): Write | null {
  const headerType = message.headers['event-type'];
  if (headerType !== undefined && !TYPES.has(headerType)) return null; // skipped without decoding
  const event = decodeDomainEvent(message.value);
  const tenantId = event.tenantId;
  if (!tenantId) return null;
  if (event.type === 'tenant.created') return (_tx, tally) => tallyEntry(tally, startingGrant(tenantId, settings.startingGrant));
  if (event.type !== 'llm.usage' || event.data?.$case !== 'usage') return null;
  return usageWrite(settings.creditsPer1kTokens, tenantId, event.data.value, event.id);
}

/** Events of a batch written in one transaction at most; a longer batch takes several. */
const BATCH_EVENTS = 100;

/**
 * Billing's bus consumer: `handler` applies one message in a transaction of its own, `handleBatch` (SubscribeOptions)
 * a delivered batch in one transaction per BATCH_EVENTS, in order: one commit for the usage of many calls, not one
 * each, and each counter they move (the account, a key's usage, the usage rollups) written once (tally.ts). Every
 * write applies once per source (the ledger's unique key), so a batch retried whole after a duplicate key (another
 * replica applied one of its calls first; the retry starts a new tally) or redelivered changes nothing already
 * applied; when the batch handler throws, the bus hands its messages to `handler` one by one (a poison message
 * dead-lettered alone).
 */
export function billingConsumer(store: Store, settings: UsageSettings, logger: Logger) {
  const handler = async (message: ReceivedMessage): Promise<void> => {
    const write = eventWrite(message, settings);
    if (!write) return;
    await applyAll(store, [write]);
    logger.debug({ eventId: message.id }, 'billing event applied');
  };
  const handleBatch = async (messages: ReceivedMessage[]): Promise<void> => {
    const writes = messages.map((m) => eventWrite(m, settings)).filter((w) => w !== null);
    for (let i = 0; i < writes.length; i += BATCH_EVENTS) {
      await applyAll(store, writes.slice(i, i + BATCH_EVENTS));
    }
    logger.debug({ messages: messages.length, applied: writes.length }, 'billing events applied');
  };
  return { handler, handleBatch };
}

/** One message at a time (billingConsumer's `handler`). */
export function billingEventHandler(store: Store, settings: UsageSettings, logger: Logger) {
  return billingConsumer(store, settings, logger).handler;
}

/**
 * One model call's usage into the ledger (an `llm.usage` event, or a call the gateway recorded itself): once per
 * call id, settling its reservation; a call with no tokens releases its reservation instead. Returns the credits
 * debited by this application (0 when it had been applied before).
 */
export async function applyUsage(store: Store, per1k: number, tenantId: string, u: eventsV1.UsageData, eventId: string): Promise<number> {
  const [credits] = await applyAll(store, [usageWrite(per1k, tenantId, u, eventId)]);
  return credits;
}

/** applyUsage's writes, in a transaction of the caller's (one call's, or a batch of events'). */
function usageWrite(per1k: number, tenantId: string, u: eventsV1.UsageData, eventId: string): Write<number> {
  // A price nobody could have meant (negative, not a number) is not applied: the call is billed at the default.
  const price = u.price && validModelPrice(u.price) === null ? u.price : undefined;
  const cachedInputTokens = Math.min(Math.max(0, u.cachedInputTokens ?? 0), Math.max(0, u.inputTokens));
  // Computed as chat's escrow computes what the call spent of it (usageCost).
  const credits = usageCost({ ...u, price }, per1k);
  // A call with nothing to bill (it never reached the model, or produced nothing): its reservation is given back,
  // and the request log keeps the call when its sender described it (an error or a cancel, 0 credits).
  if (u.callId && u.inputTokens + u.outputTokens <= 0) {
    if (!u.call)
      return async (tx, tally) => {
        await closeReservation(tx, tenantId, u.callId, 'released', tally);
        return 0;
      };
    const entry = { id: requestLogId(tenantId, `release:${u.callId}`), tenantId, credits: 0, defaultStatus: 'error' as const };
    return async (tx, tally) => {
      await closeReservation(tx, tenantId, u.callId, 'released', tally);
      await logReleasedCall(tx, requestLogEntry(u, { ...entry, at: nowIso() }));
      return 0;
    };
  }
  const sourceKey = u.callId ? `usage:call:${u.callId}` : `usage:${eventId}`;
  return async (tx, tally) => {
    // Settles the call's reservation with its usage, once per call: whoever reports the call (its generator, or a
    // sweep of what was recorded after a crash) and however often, the ledger's source is the call.
    // A call carved from an escrow has no reservation of its own: its cost comes out of the escrow below, once.
    if (u.callId && !u.escrowId) await closeReservation(tx, tenantId, u.callId, 'settled', tally);
    const entry = await tallyEntry(tally, {
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
    if (!entry) return 0;
    if (u.escrowId) await spendEscrow(tx, tenantId, u.escrowId, credits, tally);
    // The entry applied once (its source is unique): the call's log entry is one insert beside it, nothing read.
    const at = entry.createdAt;
    await logCall(tx, requestLogEntry(u, { id: requestLogId(tenantId, sourceKey), tenantId, at, credits, defaultStatus: 'ok' }));
    await recordUsageRollups(tx, entry, tally);
    const line = { calls: 1, inputTokens: u.inputTokens, outputTokens: u.outputTokens, credits };
    addUsage(tally, tenantId, 'model', u.model, '', line);
    addUsage(tally, tenantId, 'credential', u.credentialId || 'unknown', u.credentialType || '', line);
    // The key's counts, and the budget percents its spend crosses (alerts.ts), at the flush.
    if (u.credentialType === 'api_key' && u.credentialId)
      tally.keySpend(tenantId, u.credentialId, { tokens: u.inputTokens + u.outputTokens, credits, callId: u.callId });
    return credits;
  };
}

type Line = { calls: number; inputTokens: number; outputTokens: number; credits: number };

/** Running totals per tenant and model / credential, moved with the usage entry (the summary reads them). */
function addUsage(tally: Tally, tenantId: string, group: 'model' | 'credential', key: string, kind: string, line: Line) {
  const id = `${tenantId}|${group}|${key}`;
  tally.count(usageStats, id, line, () => ({
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
