import { spawn } from 'node:child_process';
import { join } from 'node:path';

const ROOT = join(__dirname, '../..');
const FIXTURE = join(ROOT, 'services/identity/test/fixtures/crash-invitation.ts');

/**
 * An invitation made by another identity process on the stack's SQLite store (services/identity/test/fixtures/
 * crash-invitation.ts), for `email` in the owner's tenant, valid for `ttlHours` (a tiny value makes it expired at
 * once). `none`: the process exits normally; `after-commit`: it is SIGKILLed as soon as the invitation commits. The
 * email is the running identity's to send either way.
 */
export async function invitationByAnotherReplica(
  dataDir: string,
  owner: { tenantId: string; userId: string },
  email: string,
  ttlHours: string,
  point: 'none' | 'after-commit',
): Promise<void> {
  const args = [join(dataDir, 'identity.db'), owner.tenantId, owner.userId, email, ttlHours, point];
  const child = spawn(process.execPath, ['--import', 'tsx', FIXTURE, ...args], { cwd: ROOT, stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
  const [code, signal] = await new Promise<[number | null, NodeJS.Signals | null]>((done) => child.on('exit', (c, s) => done([c, s])));
  const expected = point === 'after-commit' ? signal === 'SIGKILL' : code === 0;
  if (!expected) throw new Error(`the fixture ended with ${signal ?? `exit ${code}`}, not as ${point} expects:\n${stderr}`);
}
