/**
 * `svc listen --forward-to URL [--events a,b]`: the tenant's live events (GET /events/stream) forwarded to a local
 * URL as real webhook deliveries, signed with Standard Webhooks headers under a secret made for this session and
 * printed at start, so a receiver under development verifies them as it will verify the platform's. A dropped
 * connection is resumed after the last event seen (Last-Event-ID): none lost, none twice.
 */
import type { Command } from 'commander';
import { generateSecret, keyOf, signedHeaders } from '@svc/contracts/webhook-signature';
import { UsageError, VERSION, type Context } from '../context';

type StreamedEvent = { id: string; type: string; createdAt: string };

/** One forwarded delivery, as printed. */
interface Forwarded {
  eventId: string;
  type: string;
  status: number | null;
  durationMs: number;
  error?: string;
}

/** How long the local receiver may take to answer one delivery. */
const FORWARD_TIMEOUT_MS = 30_000;

export function listenCommand(program: Command, ctx: () => Context): void {
  program
    .command('listen')
    .description('Forward your live events to a local URL as signed webhook deliveries')
    .requiredOption('--forward-to <url>', 'where each event is POSTed, e.g. http://localhost:3000/hook')
    .option('--events <types>', 'only these event types, comma-separated (default: every type)')
    .action(async (o: { forwardTo: string; events?: string }) => {
      const c = ctx();
      const target = forwardUrl(o.forwardTo);
      const api = c.api();
      const types = o.events ? await knownTypes(c, o.events) : null;
      const secret = generateSecret();
      const key = keyOf(secret, true);
      const stop = new AbortController();
      const quit = () => stop.abort();
      process.once('SIGINT', quit).once('SIGTERM', quit);
      const ready = `Ready. Forwarding ${types ? types.join(', ') : 'every event'} to ${target}. Webhook signing secret: ${secret} (Ctrl-C to stop)`;
      let opened = false;
      try {
        const events = api.events({
          signal: stop.signal,
          maxResumes: Infinity,
          // Ready once the stream is open: every event from then on is forwarded.
          onOpen: () => {
            if (opened) return;
            opened = true;
            c.out(c.json ? JSON.stringify({ event: 'ready', forwardTo: target, secret, types }) : ready);
          },
          onResume: () => process.stderr.write('Connection to the event stream lost; resuming...\n'),
        });
        for await (const event of events as AsyncIterable<StreamedEvent>) {
          if (types && !types.includes(event.type)) continue;
          const result = await forward(target, event, key, stop.signal);
          c.out(c.json ? JSON.stringify({ event: 'delivery', ...result }) : statusLine(event, result));
        }
      } finally {
        process.off('SIGINT', quit).off('SIGTERM', quit);
      }
    });
}

function forwardUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new UsageError(`--forward-to must be an http(s) URL, not ${JSON.stringify(value)}`);
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new UsageError('--forward-to must be an http(s) URL');
  return url.toString();
}

/** The types asked for, each checked against the catalogue (GET /event-types): a typo would forward nothing. */
async function knownTypes(c: Context, list: string): Promise<string[]> {
  const asked = [
    ...new Set(
      list
        .split(',')
        .map((t) => t.trim())
        .filter(Boolean),
    ),
  ];
  if (asked.length === 0) throw new UsageError('--events needs at least one event type');
  const known = new Set((await c.api().call<Array<{ type: string }>>('GET', '/event-types')).map((t) => t.type));
  const unknown = asked.filter((t) => !known.has(t));
  if (unknown.length) throw new UsageError(`Unknown event type(s): ${unknown.join(', ')} (see svc api GET /event-types)`);
  return asked;
}

/** POSTs the event as a delivery: the body GET /events shows, signed as the platform signs its deliveries. */
async function forward(url: string, event: StreamedEvent, key: Buffer, signal: AbortSignal): Promise<Forwarded> {
  const body = JSON.stringify(event);
  const headers = signedHeaders([key], event.id, body, `svc-cli/${VERSION} (listen)`);
  const started = Date.now();
  try {
    const res = await fetch(url, {
      method: 'POST',
      headers,
      body,
      signal: AbortSignal.any([signal, AbortSignal.timeout(FORWARD_TIMEOUT_MS)]),
    });
    await res.arrayBuffer().catch(() => undefined);
    return { eventId: event.id, type: event.type, status: res.status, durationMs: Date.now() - started };
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).message;
    return { eventId: event.id, type: event.type, status: null, durationMs: Date.now() - started, error: cause };
  }
}

function statusLine(event: StreamedEvent, r: Forwarded): string {
  const outcome = r.status === null ? `failed: ${r.error}` : String(r.status);
  return `${new Date().toISOString()}  ${event.type.padEnd(28)} ${event.id}  -> ${outcome} (${r.durationMs} ms)`;
}
