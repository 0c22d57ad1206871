/**
 * Where `svc` keeps its credentials: `$XDG_CONFIG_HOME/svc/credentials.json` (default ~/.config/svc/), the
 * directory 0700 and the file 0600, written atomically (a temp file renamed over it) so a crash never leaves half.
 * One entry per profile (`--profile NAME` or SVC_PROFILE; `default` otherwise): `{ "profiles": { NAME: {...} } }`.
 * A file from before profiles (one entry at the top) reads as the `default` profile.
 */
import { chmodSync, mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

export interface Credentials {
  baseUrl: string;
  /** An API key (`svc login --api-key`), or the CLI login's bearer token and what renews it. */
  apiKey?: string;
  accessToken?: string;
  refreshToken?: string;
  /** Epoch ms when the access token expires. */
  expiresAt?: number;
  email: string;
  tenant: string;
}

type Profiles = Record<string, Credentials>;

export const DEFAULT_PROFILE = 'default';
/** Starts with a letter or digit: no `__proto__` and friends as keys of the file's object. */
export const PROFILE_NAME = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$/;

export function configDir(env: NodeJS.ProcessEnv): string {
  const base = env.XDG_CONFIG_HOME && env.XDG_CONFIG_HOME.startsWith('/') ? env.XDG_CONFIG_HOME : join(homedir(), '.config');
  return join(base, 'svc');
}

export const credentialsFile = (env: NodeJS.ProcessEnv) => join(configDir(env), 'credentials.json');

function readProfiles(env: NodeJS.ProcessEnv): Profiles {
  let parsed: { profiles?: Profiles } & Partial<Credentials>;
  try {
    parsed = JSON.parse(readFileSync(credentialsFile(env), 'utf8')) as typeof parsed;
  } catch {
    return {};
  }
  if (parsed.profiles && typeof parsed.profiles === 'object') return parsed.profiles;
  return typeof parsed.baseUrl === 'string' ? { [DEFAULT_PROFILE]: parsed as Credentials } : {};
}

function writeProfiles(env: NodeJS.ProcessEnv, profiles: Profiles): string {
  const dir = configDir(env);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const file = credentialsFile(env);
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify({ profiles }, null, 2) + '\n', { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
  return file;
}

export function readCredentials(env: NodeJS.ProcessEnv, profile: string): Credentials | null {
  const profiles = readProfiles(env);
  return Object.hasOwn(profiles, profile) ? profiles[profile] : null;
}

export function writeCredentials(env: NodeJS.ProcessEnv, profile: string, creds: Credentials): string {
  return writeProfiles(env, { ...readProfiles(env), [profile]: creds });
}

/** Forgets one profile; the file goes once no profile is left. */
export function removeCredentials(env: NodeJS.ProcessEnv, profile: string): boolean {
  const profiles = readProfiles(env);
  if (!Object.hasOwn(profiles, profile)) return false;
  delete profiles[profile];
  if (Object.keys(profiles).length) writeProfiles(env, profiles);
  else rmSync(credentialsFile(env), { force: true });
  return true;
}
