import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { extname, join, relative, sep } from 'node:path';
import { gzipSync } from 'node:zlib';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { AppError } from '@svc/kit';
import { readCookie, SESSION_COOKIE } from '../plugins/authenticate';
import { CONSOLE_PAGES, consolePage } from './console';
import { PAGE_CSP } from './layout';

const TYPES: Record<string, string> = {
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
};

interface Asset {
  body: Buffer;
  /** Brotli and gzip, sent to a browser that accepts them: written by the build beside the file, else gzipped here. */
  br?: Buffer;
  gzip: Buffer;
  type: string;
  etag: string;
  /** Content-hashed chunk names never change content: cache them for a year. */
  immutable: boolean;
}

/**
 * Where the static files are: the hand-written stylesheet beside this module (`assets/`), and the console's bundle
 * that scripts/build.mjs writes (`gateway/public` when the gateway runs from source; copied into dist/assets for the
 * compiled gateway, where `assets/` holds both).
 */
const ASSET_DIRS = [join(__dirname, 'assets'), join(__dirname, '../../public')];

/** Every static file the pages use, read once at start-up. */
function loadAssets(): Map<string, Asset> {
  const assets = new Map<string, Asset>();
  for (const dir of ASSET_DIRS) {
    if (!existsSync(dir)) continue;
    const walk = (d: string) => {
      for (const name of readdirSync(d)) {
        const path = join(d, name);
        if (statSync(path).isDirectory()) walk(path);
        else if (TYPES[extname(name)]) {
          const body = readFileSync(path);
          const url = `/assets/${relative(dir, path).split(sep).join('/')}`;
          const etag = `"${createHash('sha256').update(body).digest('base64url').slice(0, 22)}"`;
          assets.set(url, {
            body,
            br: existsSync(`${path}.br`) ? readFileSync(`${path}.br`) : undefined,
            gzip: existsSync(`${path}.gz`) ? readFileSync(`${path}.gz`) : gzipSync(body),
            type: TYPES[extname(name)],
            etag,
            immutable: /\/chunk-[A-Z0-9]+\.js$/.test(url),
          });
        }
      }
    };
    walk(dir);
  }
  return assets;
}

/**
 * The console build's manifest (scripts/build-console.mjs): page name -> the chunks it runs, for the shell's
 * modulepreload links. Only chunks that are served are named; without a build there are none, and the entry still
 * imports every chunk itself, one after another.
 */
function loadPreloads(assets: Map<string, Asset>): Record<string, string[]> {
  const file = ASSET_DIRS.map((dir) => join(dir, 'console/manifest.json')).find((path) => existsSync(path));
  if (!file) return {};
  const manifest = JSON.parse(readFileSync(file, 'utf8')) as Record<string, string[]>;
  return Object.fromEntries(
    Object.entries(manifest).map(([page, chunks]) => [page, chunks.filter((c) => assets.has(`/assets/console/${c}`))]),
  );
}

/**
 * The web pages (CONTRACT.md 7): sign in / sign up, the CLI approval, the settings pages, and the console, every one
 * drawn by the console's script (gateway/console). Pages are public shells; their script reads the API with the
 * session cookie, and a visitor who is not signed in is sent to /login and back.
 */
export function registerPages(app: FastifyInstance): void {
  const html = (render: (request: FastifyRequest) => string) => async (request: FastifyRequest, reply: FastifyReply) =>
    reply
      .header('content-type', 'text/html; charset=utf-8')
      .header('content-security-policy', PAGE_CSP)
      .header('cache-control', 'no-store')
      .send(render(request));

  const assets = loadAssets();
  const preloads = loadPreloads(assets);
  for (const [url, page] of Object.entries(CONSOLE_PAGES))
    app.get(
      url,
      html((request) => consolePage(page, url, request.query as Record<string, string | undefined>, preloads[page.page])),
    );

  // The console's front door: a session cookie goes to the console (whose script signs in again if the session has
  // ended), anyone else to the sign-in page, which comes back to the console.
  app.get('/', async (request, reply) =>
    reply
      .header('cache-control', 'no-store')
      .redirect(readCookie(request.headers.cookie, SESSION_COOKIE) ? '/projects' : '/login?next=%2Fprojects', 302),
  );

  app.get('/assets/*', async (request, reply) => {
    const path = request.url.split('?')[0];
    const a = assets.get(path);
    // Thrown, so the error handler answers the envelope's 404 (the not-found handler would see a GET route here).
    if (!a) throw new AppError('RESOURCE_NOT_FOUND', 'No such route', { path: path.slice(0, 300) });
    reply
      .header('content-type', a.type)
      .header('etag', a.etag)
      .header('cache-control', a.immutable ? 'public, max-age=31536000, immutable' : 'no-cache');
    reply.header('vary', 'accept-encoding');
    if (request.headers['if-none-match'] === a.etag) return reply.code(304).send();
    const accepts = String(request.headers['accept-encoding'] ?? '');
    if (a.br && /\bbr\b/.test(accepts)) return reply.header('content-encoding', 'br').send(a.br);
    if (/\bgzip\b/.test(accepts)) return reply.header('content-encoding', 'gzip').send(a.gzip);
    return reply.send(a.body);
  });
}
