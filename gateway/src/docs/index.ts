/**
 * `/docs`, the API reference (CONTRACT.md 7): public, every operation of the OpenAPI document (`/api/v1/openapi.json`)
 * rendered by Swagger UI (swagger-ui-dist: no CDN), with its schemas, generated examples and auth schemes, plus the
 * error codes, the SDK and CLI quick starts and how to verify a webhook delivery.
 *
 * Its files are built, not read here: scripts/build-docs.mjs copies Swagger UI's bundle and stylesheet and this
 * page's script and stylesheet (`assets/`: the accessibility mends and colours, decision 81) into gateway/public/docs
 * with brotli and gzip copies, and the pages' asset route serves them under /assets/docs/ (ETag, `vary:
 * accept-encoding`, the pre-built encoding as it is: no compression at run time).
 *
 * The page has its own Content-Security-Policy, as strict as Swagger UI allows: scripts and styles from this origin
 * only (no inline code, no eval), fetches to this origin only. One addition to the pages' policy (PAGE_CSP):
 * `img-src data:`, as Swagger UI's stylesheet draws its icons and arrows as data: SVG images.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { ERROR_CODES, type ErrorCode } from '@svc/kit';
import { VERIFY_WEBHOOK_NOTES, VERIFY_WEBHOOK_TS } from './webhook-verification';

export const DOCS_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join('; ');

/** What each error code means, for the reference's table (every code must have a line: the type says so). */
const ERROR_MEANINGS: Record<ErrorCode, string> = {
  VALIDATION_ERROR: 'The request is malformed or a field is invalid; details.fields lists each field and why.',
  UNAUTHORIZED: 'No credential, or it is invalid, expired or revoked.',
  INSUFFICIENT_CREDITS: 'The account (or the API key\u2019s budget) has no credits left for this call.',
  FORBIDDEN: 'The credential is valid but may not do this (role, scope, network allowlist).',
  RESOURCE_NOT_FOUND: 'No such resource in your tenant (another tenant\u2019s resources are never visible).',
  METHOD_NOT_ALLOWED: 'The path exists with other methods; the Allow header lists them.',
  CONFLICT:
    'The resource already exists, or its state does not allow the change; details.reason idempotency_key_in_progress: a request with this Idempotency-Key is still running (retry it).',
  GONE: 'A one-time link was already used, revoked or has expired; ask for a new one.',
  PAYLOAD_TOO_LARGE: 'The request body is larger than 1 MiB.',
  UNPROCESSABLE_ENTITY: 'details.reason idempotency_key_reused: this Idempotency-Key was used with another request (use a new key).',
  UNSUPPORTED_MEDIA_TYPE: 'Request bodies must be application/json in UTF-8.',
  RATE_LIMIT_EXCEEDED: 'Too many requests; retry after the Retry-After header.',
  INTERNAL_ERROR: 'Something failed on our side; the request id helps us find it.',
  SERVICE_UNAVAILABLE: 'A part of the platform is unavailable for a moment; retry after Retry-After.',
  GATEWAY_TIMEOUT: 'A service did not answer in time; the call may or may not have taken effect.',
};

const ESCAPES: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
const esc = (s: string) => s.replace(/[&<>"']/g, (c) => ESCAPES[c]);
/** Escaped text with its code spans (between backticks, written \x60 here) as <code>. */
const inline = (s: string) => esc(s).replace(/\x60([^\x60]+)\x60/g, '<code>$1</code>');

const SDK_QUICK_START = `mkdir hello-svc && cd hello-svc && npm init -y
npm install /path/to/svc/dist/release/svc-sdk-0.1.0.tgz   # from npm run release:pack (or: npm install @svc/sdk)

// hello.mjs  (SVC_API_KEY=svc_sdk_... node hello.mjs)
import { SvcClient, NotFoundError } from '@svc/sdk';
const svc = new SvcClient({ baseUrl: '{{origin}}', apiKey: process.env.SVC_API_KEY, timeout: 20000, maxRetries: 3 });
const project = await svc.projects.create({ name: 'Docs bot' });
for await (const p of svc.projects.list({ limit: 100 })) console.log(p.name);   // every page
const session = await svc.chat.sessions.create({ title: 'hello', projectId: project.id });
await svc.chat.sessions.messages.create(session.id, { content: 'Hi!' });
for await (const e of svc.chat.sessions.stream(session.id)) if (e.type === 'delta') process.stdout.write(e.delta);
await svc.projects.retrieve('prj_gone').catch((e) => e instanceof NotFoundError && console.log(e.code, e.requestId));`;

const CLI_QUICK_START = `npm install -g /path/to/svc/dist/release/svc-sdk-0.1.0.tgz /path/to/svc/dist/release/svc-cli-0.1.0.tgz
export SVC_BASE_URL={{origin}}
svc login                 # prints an address and a code: approve in the browser
svc login --profile staging --base-url https://staging.example   # a second login, kept apart (or SVC_PROFILE=staging)
svc whoami
svc projects create "Docs bot"
svc projects list --all --json   # every page (--limit N for fewer)
svc chat "Hello there"    # streams the reply
svc api GET /events?type=project.created   # any call, the whole answer
svc listen --forward-to http://localhost:3000/hook --events project.created   # live events, signed as deliveries
source <(svc completion bash)   # or zsh, fish`;

/** How the Idempotency-Key works (CONTRACT.md 14), as gateway/src/plugins/idempotency.ts does it. */
const IDEMPOTENCY_NOTES = [
  'Send `Idempotency-Key: <1-255 printable ASCII characters>` on any POST under `/api/v1` or `/v1`. The SDK and the CLI send one on every POST (yours, or a random UUID) and reuse it on each retry.',
  'The same key with the same request within 24 hours answers the first answer (status and body, with its `X-Request-Id`) and `Idempotent-Replayed: true`; the work is done once, whichever gateway answers. Keys are kept per tenant, and per API key when you use one.',
  'The same key with another method, path or body: 422 `UNPROCESSABLE_ENTITY`, `details.reason` `idempotency_key_reused`. While the first request with the key still runs: 409 `CONFLICT`, `details.reason` `idempotency_key_in_progress` (retry it).',
  'A 5xx, 429 or 408 answer is not kept: retry with the same key. Projects, API keys, webhooks, agent runs, chat messages, `/v1` calls and billing record their answer with the work, so when the work committed and its answer was lost the retry is answered from that record, not done again. A streamed answer is not replayed: afterwards the key answers 409 `idempotency_key_streamed`.',
];

const LIVE_EVENTS =
  '`GET /api/v1/events/stream` (scope `events:read`) streams your tenant\u2019s events as server-sent events as they happen (`id` the event id, `event` its type, `data` the event as `GET /api/v1/events` shows it). Reconnect with `Last-Event-ID` to resume after the last event seen, none missed and none twice. The SDK\u2019s `svc.events.stream()` resumes by itself; `svc listen --forward-to URL [--events a,b]` forwards each event to a local URL with Standard Webhooks headers.';

/**
 * The page: a server-rendered shell (no user data), Swagger UI fills #reference from the document. The page's own
 * in-page links carry `noZensmooth`: Swagger UI's bundle (zenscroll) otherwise takes over every fragment link.
 */
export function docsPage(origin: string): string {
  const fill = (s: string) => esc(s.replaceAll('{{origin}}', origin));
  const errors = (Object.keys(ERROR_CODES) as ErrorCode[])
    .map((code) => `<tr><td><code>${code}</code></td><td>${ERROR_CODES[code].http}</td><td>${esc(ERROR_MEANINGS[code])}</td></tr>`)
    .join('\n');
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>API reference · svc</title>
<link rel="stylesheet" href="/assets/docs/swagger-ui.css">
<link rel="stylesheet" href="/assets/docs/docs.css">
<script src="/assets/docs/swagger-ui-bundle.js" defer></script>
<script src="/assets/docs/docs.js" defer></script>
</head>
<body class="docs">
<a class="skip noZensmooth" href="#reference">Skip to the operations</a>
<header class="docs-header">
<h1>svc API reference</h1>
<nav aria-label="Reference">
<ul>
<li><a href="#sdk-quick-start" class="noZensmooth">SDK quick start</a></li>
<li><a href="#cli-quick-start" class="noZensmooth">CLI quick start</a></li>
<li><a href="#authentication" class="noZensmooth">Authentication</a></li>
<li><a href="#idempotency" class="noZensmooth">Idempotent requests</a></li>
<li><a href="#live-events" class="noZensmooth">Live events</a></li>
<li><a href="#verifying-webhooks" class="noZensmooth">Verifying webhooks</a></li>
<li><a href="#error-codes" class="noZensmooth">Error codes</a></li>
<li><a href="/api/v1/openapi.json">OpenAPI document (JSON)</a></li>
<li><a href="/">Console</a></li>
</ul>
</nav>
</header>
<main>
<div class="docs-intro">
<p>Every operation of the API, from its OpenAPI 3.1 document: paths, parameters, request and response schemas with
examples, and who may call it (<code>x-access</code>). Answers use the envelope <code>{"data", "meta"}</code>; errors
<code>{"error": {"code", "message", "details"}, "meta"}</code>. Lists page with <code>limit</code> and
<code>cursor</code> (<code>meta.pagination.next_cursor</code>).</p>
<div class="quick-starts">
<section aria-labelledby="sdk-quick-start">
<h2 id="sdk-quick-start">SDK quick start</h2>
<p>The JavaScript and TypeScript SDK (<code>@svc/sdk</code>: ES module, CommonJS and a browser build). Each operation
below is a method of a resource named by its path (<code>svc.projects.create</code>, <code>svc.agents.runs.list</code>,
<code>svc.chat.sessions.messages.create</code>), with a named type per resource (<code>import type { Project } from
'@svc/sdk'</code>); <code>list()</code> walks every page (<code>.page()</code> for one); errors are classes per status
(<code>NotFoundError</code>, <code>RateLimitError</code>, … with <code>code</code>, <code>details</code>,
<code>requestId</code>); <code>timeout</code> and <code>maxRetries</code> apply client-wide or per call; 408, 409
<code>idempotency_key_in_progress</code>, 429, 5xx and lost connections are retried with jittered backoff, every POST
with one <code>Idempotency-Key</code>; chat, <code>/v1</code> and event streams (<code>svc.events.stream()</code>)
resume after a dropped connection.</p>
<pre tabindex="0"><code>${fill(SDK_QUICK_START)}</code></pre>
</section>
<section aria-labelledby="cli-quick-start">
<h2 id="cli-quick-start">CLI quick start</h2>
<p>The <code>svc</code> command (<code>@svc/cli</code>): browser login and profiles (<code>--profile</code>,
<code>SVC_PROFILE</code>); every resource (projects, agents and runs, chat, models, keys, webhooks, events, requests,
secrets, usage) with <code>--limit</code> and <code>--all</code>; <code>--json</code> on every command; <code>svc
api</code> for any call; deletes ask first (<code>--yes</code> skips); <code>svc listen</code> forwards the live event
stream to a local URL signed as a webhook delivery (verify it as below with the secret it prints); shell completion for
bash, zsh and fish.</p>
<pre tabindex="0"><code>${fill(CLI_QUICK_START)}</code></pre>
</section>
</div>
<section aria-labelledby="authentication">
<h2 id="authentication">Authentication</h2>
<p>Send <code>Authorization: Bearer &lt;credential&gt;</code> with an API key (<code>svc_sdk_…</code>,
<code>svc_cli_…</code>, …, created under Settings, API keys) or an access token from
<code>POST /api/v1/auth/login</code>. The console's pages use the <code>svc_session</code> cookie instead. Use
<em>Authorize</em> below to try operations with a key; calls made here never send the console's cookie.</p>
</section>
<section aria-labelledby="idempotency">
<h2 id="idempotency">Idempotent requests</h2>
<ul>
${IDEMPOTENCY_NOTES.map((n) => `<li>${inline(n)}</li>`).join('\n')}
</ul>
</section>
<section aria-labelledby="live-events">
<h2 id="live-events">Live events</h2>
<p>${inline(LIVE_EVENTS)}</p>
</section>
<section aria-labelledby="verifying-webhooks">
<h2 id="verifying-webhooks">Verifying webhooks</h2>
<ul>
${VERIFY_WEBHOOK_NOTES.map((n) => `<li>${inline(n)}</li>`).join('\n')}
</ul>
<p>A receiver in TypeScript with the <code>standardwebhooks</code> package:</p>
<pre tabindex="0"><code>${esc(VERIFY_WEBHOOK_TS)}</code></pre>
</section>
<section aria-labelledby="error-codes">
<h2 id="error-codes">Error codes</h2>
<table class="error-codes">
<thead><tr><th scope="col">code</th><th scope="col">HTTP status</th><th scope="col">meaning</th></tr></thead>
<tbody>
${errors}
</tbody>
</table>
</section>
<h2 id="api-operations">Operations</h2>
</div>
<p id="reference-status" role="status" aria-live="polite">Loading the operations…</p>
<div id="reference" data-spec="/api/v1/openapi.json" aria-busy="true" aria-labelledby="api-operations"></div>
</main>
</body>
</html>
`;
}

/** Registers `/docs` (public: no credential needed); its files are served by registerPages under /assets/docs/. */
export function registerDocs(app: FastifyInstance, publicUrl: () => string): void {
  let page: string | null = null;
  app.get('/docs', async (_request: FastifyRequest, reply: FastifyReply) =>
    reply
      .header('content-type', 'text/html; charset=utf-8')
      .header('content-security-policy', DOCS_CSP)
      .header('cache-control', 'no-cache')
      .send((page ??= docsPage(new URL(publicUrl()).origin))),
  );
}
