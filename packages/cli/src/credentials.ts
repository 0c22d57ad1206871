/**
 * Where `svc` keeps its credentials: `$XDG_CONFIG_HOME/svc/credentials.json` (default ~/.config/svc/), the
 * directory 0700 and the file 0600, written atomically (a temp file renamed over it) so a crash never leaves half.
 * One entry per profile (`--profile NAME` or SVC_PROFILE; `default` otherwise): `{ "profiles": { NAME: {...} } }`.
 * A file from before profiles (one entry at the top) reads as the `default` profile. Each change is a read, modify and
 * write under a lock file, so two `svc` processes at once (a script renewing two profiles' tokens) never lose one.
 */
import { chmodSync, closeSync, mkdirSync, openSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
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

function ensureConfigDir(env: NodeJS.ProcessEnv): void {
  const dir = configDir(env);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
}

/** A lock older than this was left by a process that died holding it (a change takes milliseconds). */
const LOCK_STALE_MS = 10_000;
const LOCK_WAIT_MS = 15_000;
const LOCK_POLL_MS = 2;
const pause = new Int32Array(new SharedArrayBuffer(4));

/**
 * Runs a change of the file holding `credentials.json.lock` (created with O_EXCL, removed after). Synchronous, as
 * every use of the file is: the wait blocks for a few milliseconds at most while another `svc` writes.
 */
function underLock<T>(env: NodeJS.ProcessEnv, change: () => T): T {
  ensureConfigDir(env);
  const lock = `${credentialsFile(env)}.lock`;
  for (const deadline = Date.now() + LOCK_WAIT_MS; ;) {
    try {
      closeSync(openSync(lock, 'wx', 0o600));
      break;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const heldSince = (() => {
        try {
          return statSync(lock).mtimeMs;
        } catch {
          return Date.now(); // just released: try again at once
        }
      })();
      if (Date.now() - heldSince > LOCK_STALE_MS) rmSync(lock, { force: true });
      else if (Date.now() > deadline) throw new Error(`${lock} is held by another svc (remove it if none is running)`);
      else Atomics.wait(pause, 0, 0, LOCK_POLL_MS);
    }
  }
  try {
    return change();
  } finally {
    rmSync(lock, { force: true });
  }
}

function writeProfiles(env: NodeJS.ProcessEnv, profiles: Profiles): string {
  ensureConfigDir(env);
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
  return underLock(env, () => writeProfiles(env, { ...readProfiles(env), [profile]: creds }));
}

/** Forgets one profile; the file goes once no profile is left. */
export function removeCredentials(env: NodeJS.ProcessEnv, profile: string): boolean {
  return underLock(env, () => {
    const profiles = readProfiles(env);
    if (!Object.hasOwn(profiles, profile)) return false;
    delete profiles[profile];
    if (Object.keys(profiles).length) writeProfiles(env, profiles);
    else rmSync(credentialsFile(env), { force: true });
    return true;
  });
}
