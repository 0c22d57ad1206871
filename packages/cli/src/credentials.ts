/**
 * Where `svc` keeps its credentials: `$XDG_CONFIG_HOME/svc/credentials.json` (default ~/.config/svc/), the
 * directory 0700 and the file 0600, written atomically (a temp file renamed over it) so a crash never leaves half.
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

export function configDir(env: NodeJS.ProcessEnv): string {
  const base = env.XDG_CONFIG_HOME && env.XDG_CONFIG_HOME.startsWith('/') ? env.XDG_CONFIG_HOME : join(homedir(), '.config');
  return join(base, 'svc');
}

export const credentialsFile = (env: NodeJS.ProcessEnv) => join(configDir(env), 'credentials.json');

export function readCredentials(env: NodeJS.ProcessEnv): Credentials | null {
  try {
    return JSON.parse(readFileSync(credentialsFile(env), 'utf8')) as Credentials;
  } catch {
    return null;
  }
}

export function writeCredentials(env: NodeJS.ProcessEnv, creds: Credentials): string {
  const dir = configDir(env);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const file = credentialsFile(env);
  const tmp = `${file}.${process.pid}.tmp`;
  writeFileSync(tmp, JSON.stringify(creds, null, 2) + '\n', { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, file);
  return file;
}

export function removeCredentials(env: NodeJS.ProcessEnv): boolean {
  try {
    rmSync(credentialsFile(env));
    return true;
  } catch {
    return false;
  }
}
