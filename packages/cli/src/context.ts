/** What every command gets: the API for the chosen profile, base URL and credentials, and how to print. */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Api, ApiError, NetworkError } from './api';
import { DEFAULT_PROFILE, PROFILE_NAME, readCredentials, writeCredentials, type Credentials } from './credentials';

export const DEFAULT_BASE_URL = 'http://127.0.0.1:8080';
/** The CLI's version: its package's, read beside src/ or dist/ (the release script stamps it there). */
export const VERSION: string = (JSON.parse(readFileSync(join(__dirname, '../package.json'), 'utf8')) as { version: string }).version;
export const USER_AGENT = `svc-cli/${VERSION} (${process.platform}-${process.arch})`;

export class UsageError extends Error {}

export interface GlobalOptions {
  baseUrl?: string;
  json?: boolean;
  profile?: string;
}

export interface Context {
  env: NodeJS.ProcessEnv;
  baseUrl: string;
  json: boolean;
  /** The credentials file's entry in use: --profile, else SVC_PROFILE, else `default`. */
  profile: string;
  out: (text: string) => void;
  /** Prints data: JSON with --json, else the human form. */
  print: (data: unknown, human: () => string) => void;
  /** The API with the profile's credentials (or SVC_API_KEY); `required` fails when there are none. */
  api: (required?: boolean) => Api;
  /** The API with no credentials (sign-in calls). */
  anonymous: () => Api;
  credentials: () => Credentials | null;
  saveCredentials: (creds: Credentials) => string;
}

export function contextOf(options: GlobalOptions, env: NodeJS.ProcessEnv): Context {
  const profile = options.profile ?? (env.SVC_PROFILE || DEFAULT_PROFILE);
  if (!PROFILE_NAME.test(profile)) throw new UsageError(`Bad profile name "${profile}": letters, digits, _ . - (at most 64)`);
  const saved = () => readCredentials(env, profile);
  const save = (creds: Credentials) => writeCredentials(env, profile, creds);
  const baseUrl = (options.baseUrl ?? env.SVC_BASE_URL ?? saved()?.baseUrl ?? DEFAULT_BASE_URL).replace(/\/+$/, '');
  const json = Boolean(options.json);
  const out = (text: string) => void process.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
  const anonymous = () => new Api({ baseUrl, userAgent: USER_AGENT });
  return {
    env,
    baseUrl,
    json,
    profile,
    out,
    print: (data, human) => out(json ? JSON.stringify(data ?? null, null, 2) : human()),
    credentials: saved,
    saveCredentials: save,
    anonymous,
    api(required = true) {
      if (env.SVC_API_KEY) return new Api({ baseUrl, apiKey: env.SVC_API_KEY, userAgent: USER_AGENT });
      const creds = saved();
      if (!creds && required) {
        const which = profile === DEFAULT_PROFILE ? '' : ` --profile ${profile}`;
        throw new UsageError(`Not signed in: run svc login${which} (or set SVC_API_KEY).`);
      }
      if (creds?.apiKey) return new Api({ baseUrl, apiKey: creds.apiKey, userAgent: USER_AGENT });
      return new Api({
        baseUrl,
        userAgent: USER_AGENT,
        token: creds?.accessToken
          ? { accessToken: creds.accessToken, expiresIn: creds.expiresAt ? (creds.expiresAt - Date.now()) / 1000 : undefined }
          : undefined,
        // The access token expired (or is about to): renew it with the refresh token and keep the new pair.
        exchange: async () => {
          const current = saved();
          if (!current?.refreshToken) return null;
          const next = await anonymous().call<{ accessToken: string; refreshToken: string; expiresIn: number }>('POST', '/auth/refresh', {
            body: { refreshToken: current.refreshToken },
          });
          save({
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
