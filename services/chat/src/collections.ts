import { type CollectionDef, type Store, TenantCap } from '@svc/kit';

export interface SessionDoc {
  id: string;
  tenantId: string;
  /** '' when the session names none. */
  projectId: string;
  agentId: string;
  title: string;
  /** The catalogue name its replies use (absent or '': the tenant's default model). */
  model?: string;
  createdAt: string;
}

export type MessageStatus = 'pending' | 'streaming' | 'completed' | 'failed';

export interface MessageDoc {
  id: string;
  tenantId: string;
  sessionId: string;
  role: 'user' | 'assistant';
  content: string;
  projectId: string;
  status: MessageStatus;
  /** The API key that asked for a reply (its concurrency limit counts them); absent for other credentials. */
  credentialId?: string;
  /**
   * A reply that follows an agent run another response started (ReplySlots count them): it holds a reservation
   * that its end (or the sweep) gives back, since the run bills its own model calls.
   */
  follower?: boolean;
  /** Orders a session's messages: increasing per process even within one millisecond (see nextSeq). */
  seq: number;
  errorCode: string | null;
  errorMessage: string | null;
  inputTokens: number | null;
  outputTokens: number | null;
  /**
   * A reply being generated holds a lease: its generator bumps `leaseBeat` with every write and at least every third
   * of `leaseMs`. Another chat process fails the reply (its generator died) only after seeing the beat stand still
   * for `leaseMs` on its own clock (kit LeaseWatch), never by reading a time written by another machine. The
   * generator's writes (text so far, the final one) are compare-and-sets on the beat it last wrote, so a reply
   * failed meanwhile is not written again. Both null when no lease is held (absent on replies stored before).
   */
  leaseBeat?: number | null;
  leaseMs?: number | null;
  /**
   * A reply's model call as billing knows it (its reservation's call id is the reply's id): whoever ends the reply,
   * its generator or the sweep after a crash, bills it from this and what was stored (absent on user messages and on
   * replies stored before reservations).
   */
  call?: ReplyCall;
  /**
   * The escrow of the tenant's credits its hold was carved from (the chat process's, CHAT_CREDIT_ESCROW) and the hold:
   * its `llm.usage` names the escrow, whoever sends it. Absent: the call reserved on its own.
   */
  escrow?: { id: string; credits: number };
  /**
   * The chat process generating the reply, as the others reach it (its CHAT_PEER_ADDR): a stream of the reply read on
   * another process is relayed from there while it is generated. Absent when that process has no peer address.
   */
  owner?: string;
  /** The model that served the reply (a fallback's when the main model failed before answering); absent before. */
  model?: string | null;
  createdAt: string;
  completedAt: string | null;
  /**
   * Durable replies (the OpenAI-compatible API's, CONTRACT.md 9, and REST chat's) keep where each streamed chunk ends
   * (`ends[i]`, the text's length after chunk i), so a resumed stream sends exactly the chunks the first reader got,
   * numbered alike.
   */
  ends?: number[];
  /** The tool calls the model made (arguments as JSON text). */
  toolCalls?: StoredToolCall[];
  /** stop, length, tool_calls: how a completed reply ended. */
  finishReason?: string | null;
  /** A run of an agent waiting for approval, which ended this reply (a response on an agent). */
  approval?: StoredApproval | null;
  /** Not kept once it ends: a chat completion, or a response with `store: false` (no session). */
  ephemeral?: boolean;
  /**
   * The record of an embeddings call while it runs (ephemeral, no text): its whole input goes in the request, so a
   * call cut by a crash is billed its input tokens as reserved (`call.promptTokens`).
   */
  embeddings?: boolean;
  /**
   * A `/v1` call's Idempotency-Key record (kit idempotency, calls/keyed.ts): the transaction that ends the reply adds
   * it there as it ended, for a retry with the key to replay.
   */
  idempotencyId?: string;
}

export interface StoredToolCall {
  id: string;
  name: string;
  arguments: string;
}

export interface StoredApproval {
  runId: string;
  agentId: string;
  toolName: string;
  toolCallId: string;
  arguments: string;
}

/**
 * A response of the OpenAI-compatible API: the request as given and the reply (a message) that answers it. Kept
 * until `expiresAt` (RESPONSES_RETENTION_HOURS); the session's messages stay with the session.
 */
export interface ResponseDoc {
  id: string;
  tenantId: string;
  messageId: string;
  /** '' when not stored (`store: false`). */
  sessionId: string;
  model: string;
  background: boolean;
  store: boolean;
  previousResponseId: string;
  instructions: string;
  metadata: string;
  /** The request parameters echoed on the response object (JSON). */
  echo: string;
  /** A response on an agent (`agent:<id>`): the run it reports. */
  agentId?: string;
  runId?: string;
  createdAt: string;
  expiresAt: string;
}

/** Purged oldest first by `expiresAt`. */
export const responses: CollectionDef<ResponseDoc> = {
  name: 'chat_responses',
  sortField: 'expiresAt',
  indexes: [{ fields: [] }, { fields: ['messageId'] }],
};

export interface ReplyCall {
  provider: string;
  model: string;
  keySource: string;
  credentialId: string;
  credentialType: string;
  /** The prompt at 4 characters a token: the input of a cut reply's estimate. */
  promptTokens: number;
  /**
   * Stored before the model request leaves (absent: not sent, or stored by an older version): a reply cut by a crash
   * with nothing stored is billed its prompt rather than nothing.
   */
  sent?: boolean;
  /** The project and agent the reply worked for ('' for none; absent on replies of older versions): usage analytics. */
  projectId?: string;
  agentId?: string;
  /** The model as the caller asked for it (a catalogue name or the default model's name); `model` is what served. */
  name?: string;
  /** The catalogue entry that serves ('' for the default model and its fallbacks) and its price. */
  entryId?: string;
  price?: { input: number; output: number; cachedInput: number; source: string };
  /** What the request log keeps of the call (CONTRACT.md 12). */
  origin?: string;
  requestId?: string;
  endUser?: string;
  userId?: string;
}

/** Listed per tenant, newest first. */
export const sessions: CollectionDef<SessionDoc> = { name: 'chat_sessions', indexes: [{ fields: ['tenantId'] }] };

/** CHAT_SESSIONS_PER_TENANT, exact across replicas: every insert and delete of a session goes through it (kit caps). */
export function sessionCap(store: Store, limit: number): TenantCap {
  return new TenantCap(store, {
    kind: 'chat_session',
    plural: 'chat sessions',
    limit,
    count: (tx, tenantId) => tx.collection(sessions).count({ tenantId }),
  });
}

/**
 * A session's transcript pages by `seq` (oldest first); its latest reply is the newest assistant message;
 * unfinished replies are found by status at start-up.
 */
export const messages: CollectionDef<MessageDoc> = {
  name: 'chat_messages',
  sortField: 'seq',
  indexes: [
    { fields: ['sessionId'] },
    { fields: ['sessionId', 'role'] },
    { fields: ['status'] },
    { fields: ['tenantId', 'status'] },
    { fields: ['tenantId', 'follower', 'status'] },
  ],
};

let lastSeq = 0;
/** Microseconds since epoch, bumped past the previous value, so a user message sorts before its reply. */
export function nextSeq(): number {
  lastSeq = Math.max(Date.now() * 1000, lastSeq + 1);
  return lastSeq;
}
