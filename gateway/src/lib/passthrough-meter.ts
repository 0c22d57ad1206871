/**
 * What the pass-through (routes/passthrough.ts) needs to meter a provider call it does not model: the request body's
 * fields that bound its cost, put in when absent (an output bound; OpenAI's `stream_options.include_usage` on a
 * streamed chat), the usage in a JSON answer, and the usage read from a streamed answer as it passes (OpenAI's usage
 * chunk and `response.completed`; Anthropic's `message_start` and `message_delta`), with the text streamed so far
 * for a stream cut before its usage.
 */
import { StringDecoder } from 'node:string_decoder';
import { Transform } from 'node:stream';
import { createParser, type EventSourceMessage } from 'eventsource-parser';

export interface Usage {
  inputTokens: number;
  outputTokens: number;
  cachedInputTokens: number;
}

/** The generation endpoints and the field that bounds their output. */
const OUTPUT_BOUND: Array<{ provider: string; path: RegExp; field: string }> = [
  { provider: 'openai', path: /^\/chat\/completions\/?$/, field: 'max_completion_tokens' },
  { provider: 'openai', path: /^\/completions\/?$/, field: 'max_tokens' },
  { provider: 'openai', path: /^\/responses\/?$/, field: 'max_output_tokens' },
  { provider: 'anthropic', path: /^\/messages\/?$/, field: 'max_tokens' },
];
const BOUND_FIELDS = ['max_tokens', 'max_completion_tokens', 'max_output_tokens'];
/** OpenAI endpoints that take `stream_options.include_usage` (Responses always reports usage in `response.completed`). */
const USAGE_OPTION = /^\/(chat\/)?completions\/?$/;

export interface PreparedBody {
  /** The body to forward: the caller's bytes, or re-serialized when a field was put in. */
  body: unknown;
  /** The model the body names ('' when none). */
  model: string;
  /** The output bound the call runs with (the body's, or the one put in); 0 when the endpoint has none. */
  maxTokens: number;
  stream: boolean;
  /** On a streamed OpenAI chat: whether the caller asked for the usage chunk itself (else it is not shown). */
  clientWantsUsage: boolean;
  /** OpenAI's `user` (at most 200 characters), for the request log. */
  endUser: string;
  /** The prompt as text, for its token bound. */
  text: string;
}

const num = (v: unknown) => (typeof v === 'number' && Number.isFinite(v) && v >= 0 ? Math.floor(v) : undefined);

/**
 * Reads a JSON body's model and bounds, and puts in what metering needs when it is absent: the output bound
 * (`defaultMaxTokens`) on a generation endpoint, and `stream_options.include_usage` on a streamed OpenAI chat.
 * A body that is not a JSON object is forwarded as it came.
 */
export function prepareBody(provider: string, path: string, body: unknown, contentType: string | undefined, defaultMaxTokens: number) {
  const raw = Buffer.isBuffer(body) ? body : null;
  const text = raw ? raw.toString('utf8') : '';
  const plain: PreparedBody = { body, model: '', maxTokens: 0, stream: false, clientWantsUsage: true, endUser: '', text };
  if (!raw || raw.length === 0 || !/json/i.test(contentType ?? '')) return plain;
  let parsed: Record<string, unknown>;
  try {
    parsed = JSON.parse(text) as Record<string, unknown>;
  } catch {
    return plain;
  }
  if (!parsed || typeof parsed !== 'object' || Array.isArray(parsed)) return plain;
  const out: PreparedBody = {
    ...plain,
    model: typeof parsed.model === 'string' ? parsed.model.slice(0, 200) : '',
    stream: parsed.stream === true,
    endUser: typeof parsed.user === 'string' ? parsed.user.slice(0, 200) : '',
  };
  let changed = false;
  const given = BOUND_FIELDS.map((f) => num(parsed[f])).find((v) => v !== undefined);
  const bound = OUTPUT_BOUND.find((b) => b.provider === provider && b.path.test(path));
  if (given !== undefined) out.maxTokens = Math.min(200_000, given);
  else if (bound) {
    parsed[bound.field] = defaultMaxTokens;
    out.maxTokens = defaultMaxTokens;
    changed = true;
  }
  if (out.stream && provider === 'openai' && USAGE_OPTION.test(path)) {
    const options = parsed.stream_options;
    const asked = !!options && typeof options === 'object' && (options as { include_usage?: unknown }).include_usage === true;
    out.clientWantsUsage = asked;
    if (!asked) {
      parsed.stream_options = { ...(options && typeof options === 'object' ? options : {}), include_usage: true };
      changed = true;
    }
  }
  if (changed) out.body = Buffer.from(JSON.stringify(parsed));
  return out;
}

/** Usage in the shapes OpenAI (`prompt_tokens`/`completion_tokens`, `input_tokens`/`output_tokens`) and Anthropic use. */
export function usageOf(body: unknown): Usage | null {
  const u = (body as { usage?: Record<string, unknown> } | null)?.usage;
  if (!u || typeof u !== 'object') return null;
  const first = (...values: unknown[]) => values.map(num).find((v) => v !== undefined) ?? 0;
  const details = (u.prompt_tokens_details ?? u.input_tokens_details) as Record<string, unknown> | undefined;
  // Anthropic counts cache reads and writes apart from input_tokens; OpenAI's cached tokens are part of its input.
  const anthropicCached = first(u.cache_read_input_tokens) + first(u.cache_creation_input_tokens);
  const inputTokens = first(u.prompt_tokens, u.input_tokens) + anthropicCached;
  const total = first(u.total_tokens);
  const outputTokens = first(u.completion_tokens, u.output_tokens) || Math.max(0, total - inputTokens);
  const cachedInputTokens = first(details?.cached_tokens) + first(u.cache_read_input_tokens);
  return inputTokens + outputTokens > 0 ? { inputTokens, outputTokens, cachedInputTokens } : null;
}

/**
 * Reads a streamed answer's server-sent events as they pass: the usage the provider reports, the model that served,
 * and the characters of text and tool arguments streamed (a cut stream's estimate). Each event is passed on as it
 * came, except OpenAI's usage chunk when the pass-through asked for it and the caller did not.
 */
export class StreamMeter {
  input: number | undefined;
  output: number | undefined;
  cached = 0;
  servedModel = '';
  streamedChars = 0;
  /** When the first text arrived (ms since the call started), for the request log. */
  firstTokenAt: number | undefined;
  private readonly started = Date.now();

  constructor(private readonly hideUsageChunk: boolean) {}

  /** Reads one event's data; false when the event is not to be passed on. */
  read(data: string): boolean {
    if (data === '[DONE]' || data === '') return true;
    let e: Record<string, unknown>;
    try {
      e = JSON.parse(data) as Record<string, unknown>;
    } catch {
      return true;
    }
    if (!e || typeof e !== 'object') return true;
    const model = typeof e.model === 'string' ? e.model : (e.message as { model?: unknown } | undefined)?.model;
    if (typeof model === 'string' && !this.servedModel) this.servedModel = model.slice(0, 200);
    switch (e.type) {
      case 'message_start': // Anthropic: the input (and a first output count) before any text
        this.take(usageOf(e.message), true);
        return true;
      case 'message_delta': // Anthropic: the output so far, cumulative
        this.take(usageOf({ usage: { output_tokens: 0, ...(e.usage as object) } }), false);
        return true;
      case 'content_block_delta': {
        const d = e.delta as Record<string, unknown> | undefined;
        this.streamed(d?.text ?? d?.partial_json ?? d?.thinking);
        return true;
      }
      case 'response.output_text.delta':
      case 'response.function_call_arguments.delta':
      case 'response.reasoning_summary_text.delta':
        this.streamed(e.delta);
        return true;
      case 'response.completed':
      case 'response.incomplete':
      case 'response.failed': {
        const r = e.response as Record<string, unknown> | undefined;
        if (typeof r?.model === 'string') this.servedModel = r.model.slice(0, 200);
        this.take(usageOf(r), true);
        return true;
      }
      default:
        break;
    }
    // OpenAI Chat Completions (and legacy completions): deltas, then the usage chunk (no choices) when asked for.
    const choices = Array.isArray(e.choices) ? (e.choices as Array<Record<string, unknown>>) : [];
    for (const c of choices) {
      const delta = c.delta as Record<string, unknown> | undefined;
      this.streamed(delta?.content ?? c.text);
      for (const call of (delta?.tool_calls as Array<{ function?: { arguments?: unknown } }> | undefined) ?? [])
        this.streamed(call.function?.arguments);
    }
    const usage = usageOf(e);
    if (usage) {
      this.take(usage, true);
      if (this.hideUsageChunk && choices.length === 0) return false;
    }
    return true;
  }

  private streamed(text: unknown) {
    if (typeof text !== 'string' || text === '') return;
    this.firstTokenAt ??= Date.now() - this.started;
    this.streamedChars += text.length;
  }

  private take(usage: Usage | null, withInput: boolean) {
    if (!usage) return;
    if (withInput && usage.inputTokens) this.input = usage.inputTokens;
    if (withInput) this.cached = usage.cachedInputTokens;
    if (usage.outputTokens || this.output === undefined) this.output = Math.max(this.output ?? 0, usage.outputTokens);
  }

  /**
   * The call's usage: what the provider reported, else (a stream cut before its usage) the text streamed so far at 4
   * characters a token, as chat estimates a cut reply, with the prompt at its bound. Null when nothing was streamed
   * or reported (nothing to bill: the hold is released).
   */
  usage(promptBound: number): Usage | null {
    if (this.input === undefined && this.output === undefined && this.streamedChars === 0) return null;
    const estimatedOutput = Math.ceil(this.streamedChars / 4);
    return {
      inputTokens: this.input ?? promptBound,
      outputTokens: Math.max(this.output ?? 0, this.output === undefined ? estimatedOutput : 0),
      cachedInputTokens: this.cached,
    };
  }

  /** Whether the provider reported the usage (not an estimate). */
  get reported(): boolean {
    return this.input !== undefined;
  }
}

/** The SSE framing of one event as the parser read it (each field on its own line). */
function frame(e: EventSourceMessage): string {
  let out = '';
  if (e.id !== undefined) out += `id: ${e.id}\n`;
  if (e.event !== undefined) out += `event: ${e.event}\n`;
  for (const line of e.data.split('\n')) out += `data: ${line}\n`;
  return `${out}\n`;
}

/**
 * A Transform that passes a provider's event stream through its meter, event by event (eventsource-parser frames
 * them), capped at `maxBytes` of input; `onTooLarge` builds the error it ends with past the cap.
 */
export function meteredStream(meter: StreamMeter, maxBytes: number, onTooLarge: () => Error): Transform {
  let size = 0;
  let out: string[] = [];
  const decoder = new StringDecoder('utf8'); // a character split across chunks is decoded whole
  const parser = createParser({
    onEvent: (e) => {
      if (meter.read(e.data)) out.push(frame(e));
    },
    onRetry: (ms) => out.push(`retry: ${ms}\n\n`),
  });
  return new Transform({
    transform(chunk: Buffer, _enc, done) {
      size += chunk.length;
      if (size > maxBytes) return done(onTooLarge());
      parser.feed(decoder.write(chunk));
      const text = out.join('');
      out = [];
      done(null, text === '' ? undefined : text);
    },
    flush(done) {
      parser.feed(decoder.end());
      parser.reset({ consume: true });
      const text = out.join('');
      out = [];
      done(null, text === '' ? undefined : text);
    },
  });
}
