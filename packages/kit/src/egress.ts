/**
 * The egress guard: every outbound call to an address a tenant chose (webhook receivers, LLM base URLs, BYOS
 * endpoints) goes through here. http(s) only; the resolved address is checked at connect time, so a name that
 * resolves to a private address (or changes to one later: DNS rebinding) is refused at every call, not only when
 * it was registered; no redirects are followed; timeouts and a response size cap bound what a receiver can cost.
 */
import { isIP } from 'node:net';
import ipaddr from 'ipaddr.js';
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import type { Readable } from 'node:stream';
import type * as Undici from 'undici';

/** undici, loaded by the first guarded request, not at start (~60 ms of a services process's start). */
// eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load (cached by require)
const undici = () => require('undici') as typeof Undici;
/** A value made by its first use (a guarded agent: made by the first request, with undici). */
const lazily = <T>(make: () => T): (() => T) => {
  let made: T | undefined;
  return () => (made ??= make());
};

export type EgressRefusal = 'scheme' | 'credentials' | 'address' | 'dns' | 'redirect' | 'timeout' | 'too_large' | 'connection';

export class EgressError extends Error {
  constructor(
    readonly reason: EgressRefusal,
    message: string,
  ) {
    super(message);
    this.name = 'EgressError';
  }
}

export interface EgressPolicy {
  /** Let calls reach loopback, private, link-local and unique-local addresses (EGRESS_ALLOW_PRIVATE). */
  allowPrivate: boolean;
}

/**
 * The IPv4 address inside an IPv6 form that carries one: IPv4-compatible (::/96) and IPv4-mapped (::ffff:0:0/96),
 * SIIT (::ffff:0:0:0/96), NAT64 (64:ff9b::/96) and 6to4 (2002::/16). Such an address reaches that IPv4 host, so it
 * is judged as that host.
 */
function embeddedIPv4(v6: ipaddr.IPv6): ipaddr.IPv4 | null {
  const p = v6.parts;
  const zero = (from: number, to: number) => p.slice(from, to).every((x) => x === 0);
  const last32 = () => new ipaddr.IPv4([p[6] >> 8, p[6] & 255, p[7] >> 8, p[7] & 255]);
  if (zero(0, 6) || (zero(0, 5) && p[5] === 0xffff) || (zero(0, 4) && p[4] === 0xffff && p[5] === 0)) return last32();
  if (p[0] === 0x64 && p[1] === 0xff9b && zero(2, 6)) return last32();
  if (p[0] === 0x2002) return new ipaddr.IPv4([p[1] >> 8, p[1] & 255, p[2] >> 8, p[2] & 255]);
  return null;
}

/**
 * Whether an address is global unicast, by ipaddr.js's table of special ranges (private, loopback, link-local,
 * carrier-grade NAT, documentation, benchmarking, discard, Teredo, local-use NAT64, multicast, reserved...), with
 * embedded IPv4 addresses judged as the IPv4 host they reach. Anything not plainly global is refused.
 */
export function isGlobalUnicast(address: string): boolean {
  let parsed: ipaddr.IPv4 | ipaddr.IPv6;
  try {
    parsed = ipaddr.parse(address);
  } catch {
    return false;
  }
  if (parsed.kind() === 'ipv6') parsed = embeddedIPv4(parsed as ipaddr.IPv6) ?? parsed;
  return parsed.range() === 'unicast';
}

/** Cloud metadata endpoints: never a legitimate target, refused even when private egress is allowed. */
const METADATA = new Set(['169.254.169.254', 'fd00:ec2::254', '100.100.100.200']);

function unmapped(address: string): string {
  const m = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  return m ? m[1] : address;
}

/** Why this address may not be reached, or null when it may. */
export function refusedAddress(address: string, policy: EgressPolicy): string | null {
  const addr = unmapped(address.replace(/^\[|\]$/g, ''));
  const family = isIP(addr);
  if (!family) return 'is not an IP address';
  if (METADATA.has(addr.toLowerCase())) return 'is a cloud metadata address';
  if (policy.allowPrivate) return null;
  return isGlobalUnicast(addr) ? null : 'is not a global unicast address (loopback, private, link-local, reserved or special-purpose)';
}

/**
 * Checks a URL's shape (scheme, no credentials) and, when its host is an IP literal, the address. Host names are
 * checked when they resolve (`resolveAndCheck` at registration, the connect hook at every call). Throws EgressError.
 */
export function checkUrlShape(raw: string, policy: EgressPolicy): URL {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    throw new EgressError('scheme', 'is not a valid URL');
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new EgressError('scheme', 'must use http or https');
  if (url.username || url.password) throw new EgressError('credentials', 'must not carry a user name or password');
  if (!url.hostname) throw new EgressError('scheme', 'needs a host');
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host)) {
    const why = refusedAddress(host, policy);
    if (why) throw new EgressError('address', `${host} ${why}`);
  } else if (!policy.allowPrivate && /(^|\.)localhost\.?$/i.test(host)) {
    // `localhost.` (fully qualified) is the same name: refused whether or not the resolver answers for it.
    throw new EgressError('address', `${host} is a loopback name`);
  }
  return url;
}

type Lookup = (
  hostname: string,
  options: { all: true },
  cb: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void;

/** Resolves the URL's host and checks every address it gives: for a clear answer at registration time. */
export async function resolveAndCheck(raw: string, policy: EgressPolicy, lookup: Lookup = dnsLookup as Lookup): Promise<URL> {
  const url = checkUrlShape(raw, policy);
  const host = url.hostname.replace(/^\[|\]$/g, '');
  if (isIP(host)) return url;
  const addresses = await new Promise<LookupAddress[]>((ok, fail) =>
    lookup(host, { all: true }, (err, list) => (err ? fail(new EgressError('dns', `${host} does not resolve`)) : ok(list))),
  );
  for (const a of addresses) {
    const why = refusedAddress(a.address, policy);
    if (why) throw new EgressError('address', `${host} resolves to ${a.address}, which ${why}`);
  }
  return url;
}

export interface EgressFetchOptions extends EgressPolicy {
  /** Whole-call limit (headers and body) in ms; none when unset (callers with streams keep their own). */
  timeoutMs?: number;
  /** Connection set-up limit. Default 5 s. */
  connectTimeoutMs?: number;
  /** Response bodies larger than this fail with EgressError('too_large'). Default 10 MiB. */
  maxResponseBytes?: number;
  /** For tests: a resolver in place of the system's. */
  lookup?: Lookup;
}

export type EgressFetch = (input: string | URL, init?: RequestInit) => Promise<Response>;

/**
 * A fetch for tenant-chosen URLs. The connection's address is checked when the socket is opened (so the address
 * used is the address checked), redirects are returned as they are (never followed), and the body is capped.
 * Failures are EgressError (refusals, timeouts, size) or the transport's own error.
 */
/**
 * The connection pool of the guard: the resolved address is checked when each socket is opened. `maxResponseSize`:
 * undici's own cap on a body (past it the body fails), for callers that hand the body on as it is.
 */
function guardedAgent(options: EgressFetchOptions, policy: EgressPolicy, maxResponseSize?: number): Undici.Agent {
  return new (undici().Agent)({
    ...(maxResponseSize !== undefined ? { maxResponseSize } : {}),
    connect: {
      timeout: options.connectTimeoutMs ?? 5000,
      // Called by net.connect for host names (IP literals are checked by checkUrlShape before the call).
      lookup: guardedLookup(policy, options.lookup) as never,
    },
  });
}

/**
 * The guard as an undici dispatcher, for callers that hand connections to another library (the gateway's provider
 * pass-through, through @fastify/reply-from): a host name resolving to a refused address fails when the socket is
 * opened. IP literals are not resolved, so check the URL with checkUrlShape before each request.
 */
export function egressDispatcher(options: EgressFetchOptions): Undici.Agent {
  return guardedAgent(options, { allowPrivate: options.allowPrivate });
}

type LookupCallback = (err: NodeJS.ErrnoException | null, address?: string | LookupAddress[], family?: number) => void;

/**
 * A `lookup` for net.connect (undici's connect, Node's http agents) that refuses a host name resolving to an address
 * the policy does not allow: the address checked is the address used, at every connection.
 */
export function guardedLookup(policy: EgressPolicy, lookup: Lookup = dnsLookup as Lookup) {
  return (hostname: string, opts: { all?: boolean }, cb: LookupCallback): void => {
    lookup(hostname, { all: true }, (err, addresses) => {
      if (err) return cb(new EgressError('dns', `${hostname} does not resolve`));
      for (const a of addresses) {
        const why = refusedAddress(a.address, policy);
        if (why) return cb(new EgressError('address', `${hostname} resolves to ${a.address}, which ${why}`));
      }
      if (opts.all) cb(null, addresses);
      else cb(null, addresses[0].address, addresses[0].family);
    });
  };
}

export function egressFetch(options: EgressFetchOptions): EgressFetch {
  const policy: EgressPolicy = { allowPrivate: options.allowPrivate };
  const maxBytes = options.maxResponseBytes ?? 10 * 1024 * 1024;
  const agent = lazily(() => guardedAgent(options, policy));

  return async (input, init = {}) => {
    const url = checkUrlShape(String(input), policy);
    const signals: AbortSignal[] = [];
    if (init.signal) signals.push(init.signal);
    if (options.timeoutMs) signals.push(AbortSignal.timeout(options.timeoutMs));
    const signal = signals.length > 1 ? AbortSignal.any(signals) : signals[0];
    let res: Awaited<ReturnType<typeof Undici.fetch>>;
    try {
      res = await undici().fetch(url, { ...(init as Undici.RequestInit), signal, redirect: 'manual', dispatcher: agent() });
    } catch (err) {
      throw translate(err, signal, init.signal ?? undefined);
    }
    const capped = capBody(res.body as ReadableStream<Uint8Array> | null, maxBytes, signal, init.signal ?? undefined);
    return new Response(capped, { status: res.status, statusText: res.statusText, headers: res.headers as unknown as Headers });
  };
}

export interface EgressReply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /**
   * The first `bytes` of the body, as UTF-8; the rest is read and discarded up to the size cap (so the connection
   * can be reused) or the connection dropped. Best effort: a body that fails half-way gives what arrived.
   */
  excerpt(bytes: number): Promise<string>;
}

export type EgressRequest = (
  url: string | URL,
  init: { method: string; headers?: Record<string, string>; body?: string | Uint8Array; signal?: AbortSignal },
) => Promise<EgressReply>;

/**
 * The same guard as egressFetch (shape check, connect-time address check, no redirects, timeouts, size cap) on
 * undici's plain request API: no WHATWG streams, about a quarter of fetch's CPU per call, for callers that send
 * many small requests and need only the status and a glimpse of the answer (webhook delivery). `timeoutMs` bounds
 * the whole call, body included.
 */
export function egressRequest(options: EgressFetchOptions): EgressRequest {
  const policy: EgressPolicy = { allowPrivate: options.allowPrivate };
  const maxBytes = options.maxResponseBytes ?? 10 * 1024 * 1024;
  const agent = lazily(() => guardedAgent(options, policy));
  return async (input, init) => {
    const url = checkUrlShape(String(input), policy);
    const timeout = options.timeoutMs ? AbortSignal.timeout(options.timeoutMs) : undefined;
    const signal = timeout && init.signal ? AbortSignal.any([timeout, init.signal]) : (timeout ?? init.signal);
    let res: Awaited<ReturnType<typeof Undici.request>>;
    try {
      res = await undici().request(url, {
        method: init.method as 'POST',
        headers: init.headers,
        body: init.body,
        signal,
        dispatcher: agent(), // undici 7's request() never follows redirects (that takes an interceptor)
      });
    } catch (err) {
      throw translate(err, signal, init.signal);
    }
    return {
      status: res.statusCode,
      headers: res.headers,
      async excerpt(bytes: number) {
        const kept: Buffer[] = [];
        let keptSize = 0;
        let total = 0;
        try {
          for await (const chunk of res.body as AsyncIterable<Buffer>) {
            total += chunk.length;
            if (keptSize < bytes) {
              kept.push(chunk);
              keptSize += chunk.length;
            }
            if (total > maxBytes) {
              res.body.destroy();
              break;
            }
          }
        } catch {
          // what arrived is all there is
        }
        return Buffer.concat(kept).subarray(0, bytes).toString('utf8');
      },
    };
  };
}

export interface EgressStreamReply {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  /**
   * The body as undici gives it (a Node readable, no WHATWG stream over it): read to its end the connection is
   * kept for the next call, destroyed it is closed. Past the size cap it fails (UND_ERR_RES_EXCEEDED_MAX_SIZE).
   */
  body: Readable;
}

export type EgressStream = (
  url: string | URL,
  init: { method: string; headers?: Record<string, string>; body?: string | Uint8Array; signal?: AbortSignal },
) => Promise<EgressStreamReply>;

/**
 * The same guard as egressFetch (shape check, connect-time address check, no redirects, timeouts, size cap) on
 * undici's plain request API, for callers that read whole answers or stream them (the LLM providers, which measured
 * fetch's WHATWG layer at ~0.3-0.4 ms of CPU a call). The body is capped by the pool itself; `timeoutMs` bounds the
 * whole call, body included. Keep-alive: one pool per origin, as every undici Agent.
 */
export function egressStream(options: EgressFetchOptions): EgressStream {
  const policy: EgressPolicy = { allowPrivate: options.allowPrivate };
  const agent = lazily(() => guardedAgent(options, policy, options.maxResponseBytes ?? 10 * 1024 * 1024));
  return async (input, init) => {
    const url = checkUrlShape(String(input), policy);
    const timeout = options.timeoutMs ? AbortSignal.timeout(options.timeoutMs) : undefined;
    const signal = timeout && init.signal ? AbortSignal.any([timeout, init.signal]) : (timeout ?? init.signal);
    try {
      const res = await undici().request(url, {
        method: init.method as 'POST',
        headers: init.headers,
        body: init.body,
        signal,
        dispatcher: agent(),
      });
      return { status: res.statusCode, headers: res.headers, body: res.body };
    } catch (err) {
      throw translate(err, signal, init.signal);
    }
  };
}

/** A refusal from the connect hook arrives wrapped in fetch's TypeError; timeouts arrive as abort errors. */
function translate(err: unknown, signal: AbortSignal | undefined, callerSignal: AbortSignal | undefined): unknown {
  for (let e: unknown = err; e; e = (e as { cause?: unknown }).cause) if (e instanceof EgressError) return e;
  if (signal?.aborted && !callerSignal?.aborted) return new EgressError('timeout', 'the call took too long');
  if (callerSignal?.aborted) return err;
  const code = (err as { code?: string }).code ?? (err as { cause?: { code?: string } }).cause?.code;
  if (code === 'UND_ERR_CONNECT_TIMEOUT') return new EgressError('timeout', 'connecting took too long');
  if (code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT') return new EgressError('timeout', 'the call took too long');
  if (code === 'UND_ERR_RES_EXCEEDED_MAX_SIZE') return new EgressError('too_large', 'the response is larger than the limit');
  return err;
}

function capBody(
  body: ReadableStream<Uint8Array> | null,
  maxBytes: number,
  signal: AbortSignal | undefined,
  callerSignal: AbortSignal | undefined,
): ReadableStream<Uint8Array> | null {
  if (!body) return null;
  const reader = body.getReader();
  let seen = 0;
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { done, value } = await reader.read();
        if (done) return controller.close();
        seen += value.byteLength;
        if (seen > maxBytes) {
          void reader.cancel();
          return controller.error(new EgressError('too_large', `the response is larger than ${maxBytes} bytes`));
        }
        controller.enqueue(value);
      } catch (err) {
        controller.error(translate(err, signal, callerSignal));
      }
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
}

/** The setting: EGRESS_ALLOW_PRIVATE when given, else allowed everywhere but production (CONTRACT.md 1). */
export function egressPolicyFrom(config: { egressAllowPrivate?: boolean; nodeEnv: string }): EgressPolicy {
  return { allowPrivate: config.egressAllowPrivate ?? config.nodeEnv !== 'production' };
}
