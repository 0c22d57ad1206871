/** What every command gets: the SDK client for the chosen base URL and credentials, and how to print. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ApiError, NetworkError, SvcClient } from '@svc/sdk';
import { readCredentials, writeCredentials, type Credentials } from './credentials';

export const DEFAULT_BASE_URL = 'http://127.0.0.1:8080';
/** The CLI's version: its package's, read beside src/ or dist/ (the release script stamps it there). */
export const VERSION: string = (JSON.parse(readFileSync(join(__dirname, '../package.json'), 'utf8')) as { version: string }).version;

export class UsageError extends Error {}

export interface GlobalOptions {
  baseUrl?: string;
  json?: boolean;
}

export interface Context {
  env: NodeJS.ProcessEnv;
  baseUrl: string;
  json: boolean;
  out: (text: string) => void;
  /** Prints data: JSON with --json, else the human form. */
  print: (data: unknown, human: () => string) => void;
  /** A client with the saved credentials (or SVC_API_KEY); `required` fails when there are none. */
  client: (required?: boolean) => SvcClient;
  credentials: () => Credentials | null;
}

export function contextOf(options: GlobalOptions, env: NodeJS.ProcessEnv): Context {
  const saved = () => readCredentials(env);
  const baseUrl = (options.baseUrl ?? env.SVC_BASE_URL ?? saved()?.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, '');
  const json = Boolean(options.json);
  const out = (text: string) => void process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
  return {
    env,
    baseUrl,
    json,
    out,
    print: (data, human) => out(json ? JSON.stringify(data, null, 2) : human()),
    credentials: saved,
    client(required = true) {
      const userAgent = `svc-cli/${VERSION} (${process.platform}-${process.arch})`;
      if (env.SVC_API_KEY) return new SvcClient({ baseUrl, apiKey: env.SVC_API_KEY, userAgent });
      const creds = saved();
      if (!creds && required) throw new UsageError('Not signed in: run svc login (or set SVC_API_KEY).');
      if (creds?.apiKey) return new SvcClient({ baseUrl, apiKey: creds.apiKey, userAgent });
      return new SvcClient({
        baseUrl,
        userAgent,
        token: creds?.accessToken
          ? { accessToken: creds.accessToken, expiresIn: creds.expiresAt ? (creds.expiresAt - Date.now()) / 1000 : undefined }
          : undefined,
        // The access token expired (or is about to): renew it with the refresh token and keep the new pair.
        exchange: async () => {
          const current = saved();
          if (!current?.refreshToken) return null;
          const anon = new SvcClient({ baseUrl, userAgent });
          const next = await anon.refresh({ body: { refreshToken: current.refreshToken } });
          writeCredentials(env, {
            ...current,
            accessToken: next.accessToken,
            refreshToken: next.refreshToken,
            expiresAt: Date.now() + next.expiresIn * 1000,
          });
          return { accessToken: next.accessToken, expiresIn: next.expiresIn };
        },
      });
    },
  };
}

/** A friendly line for an error, with the request id when the API gave one. */
export function describeError(err: unknown): string {
  if (err instanceof ApiError) {
    const hint = err.status === 401 ? ' Run svc login to sign in again.' : '';
    const fields = Array.isArray(err.details.fields)
      ? ` (${(err.details.fields as Array<{ field: string; message: string }>).map((f) => `${f.field}: ${f.message}`).join('; ')})`
      : '';
    return `Error: ${err.message}${fields} [${err.code}${err.requestId ? `, request id ${err.requestId}` : ''}]${hint}`;
  }
  if (err instanceof NetworkError) return `Error: ${err.message}. Is the service running? (--base-url or SVC_BASE_URL)`;
  if (err instanceof UsageError) return `Error: ${err.message}`;
  return `Error: ${(err as Error).message ?? String(err)}`;
}
