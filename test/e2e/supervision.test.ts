import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { reservablePorts } from '@svc/kit/ports';
import { client, eventually, signUp } from '../helpers/http';
import { startSystem, type SystemProcess } from '../helpers/process';
import { linkToken, startMailServer, type MailServer } from '../helpers/smtp';

// The system as `npm start` runs it: a part that dies is restarted by the launcher and its routes answer 503 meanwhile.
// With one process per service (SVC_LAYOUT=per-service, as deploy/ runs them) every other route keeps working; in the
// default layout (the services share a process) the gateway keeps answering, in the envelope, until they are back.
// Identity SIGKILLed in the middle of an invitation's send (committed, its message at the SMTP server in this test,
// not yet answered): the restarted identity sends it again, once, with the same Message-ID.
jest.setTimeout(120_000);

let dataDir: string;
let system: SystemProcess | null = null;
let mail: MailServer;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), 'svc-supervision-'));
  mail = await startMailServer();
});
/** /readyz's status once it is 200, or the last one after `ms` (the gateway keeps a check for a second). */
async function readyWithin(api: ReturnType<typeof client>, ms: number): Promise<number> {
  const deadline = Date.now() + ms;
  let status = (await api.get('/readyz')).status;
  while (status !== 200 && Date.now() < deadline) {
    await new Promise((r) => setTimeout(r, 200));
    status = (await api.get('/readyz')).status;
  }
  return status;
}

/** The project once projects answers again (a restarted process needs a moment to be found on its port). */
async function projectOnceBack(api: ReturnType<typeof client>, id: string, token: string) {
  let back = await api.get(`/api/v1/projects/${id}`, { token });
  for (let i = 0; back.status !== 200 && i < 50; i++) {
    await new Promise((r) => setTimeout(r, 100));
    back = await api.get(`/api/v1/projects/${id}`, { token });
  }
  return back;
}

afterAll(async () => {
  if (system) await system.kill().catch(() => undefined);
  await mail?.close();
  rmSync(dataDir, { recursive: true, force: true });
});

it('restarts a SIGKILLed service by itself; its routes 503 meanwhile while the others answer', async () => {
  system = await startSystem({ DATA_DIR: dataDir, SVC_LAYOUT: 'per-service', SMTP_URL: mail.url });
  const api = client(system.url);
  const owner = await signUp(api, 'Supervised');
  const t = { token: owner.accessToken };
  const project = (await api.post('/api/v1/projects', { name: 'kept' }, t)).body.data;

  const killed = await system.killService('projects');
  const killedAt = Date.now();
  // While projects is down: its routes are 503 in the envelope, the rest of the system is untouched.
  const down = await api.get(`/api/v1/projects/${project.id}`, t);
  expect(down.status).toBe(503);
  expect(down.body.error.code).toBe('SERVICE_UNAVAILABLE');
  expect((await api.get('/api/v1/tenant', t)).status).toBe(200);
  expect((await api.get('/api/v1/agents', t)).status).toBe(200);
  expect((await api.get('/healthz')).status).toBe(200);
  const ready = await api.get('/readyz');
  expect(ready.status).toBe(503);
  expect(ready.text).toContain('projects');

  await system.restarted('projects', killed);
  // Back: the same data, and the gateway found the new process on the same port.
  const back = await projectOnceBack(api, project.id, t.token);
  expect(back.status).toBe(200);
  expect(back.body.data.name).toBe('kept');
  expect(system.output()).toMatch(/projects exited; restarting/);
  // Time to recover, for the closing note (not asserted: performance is measured by benchmarks).
  console.info(`projects answered again ${Date.now() - killedAt} ms after SIGKILL`);
  expect(await readyWithin(api, 5000)).toBe(200);
});

it('SIGKILL of identity between an invitation commit and its send: the email arrives after the restart, once, same Message-ID', async () => {
  if (!system) throw new Error('the per-service system of the test before did not start');
  const api = client(system.url);
  const owner = await signUp(api, 'Inviting');
  const email = `crash-${Date.now()}@example.com`;
  mail.holdOnce.add(email);
  const invited = await api.post('/api/v1/tenant/team/invitations', { email, role: 'member' }, { token: owner.accessToken });
  expect(invited.status).toBe(201);
  // Committed, and identity is sending it: the SMTP server has the whole message and has not answered.
  await eventually(async () => mail.held.some((m) => m.to === email), 20_000);
  const killed = await system.killService('identity');
  await system.restarted('identity', killed);
  await eventually(async () => mail.received.some((m) => m.to === email), 30_000);
  const [sent] = mail.held.filter((m) => m.to === email);
  const delivered = mail.received.filter((m) => m.to === email);
  expect(delivered.map((m) => [m.subject, m.messageId])).toEqual([['You are invited to Inviting', sent.messageId]]);
  // Sent means gone from the outbox: the link works (once the gateway has found the new process again, as a client
  // retrying a 503 would), and nothing more is sent to the address.
  expect(await readyWithin(api, 10_000)).toBe(200);
  const token = linkToken(delivered[0], '/invitations');
  const accepted = await api.post('/api/v1/auth/invitations/accept', { token, name: 'After the crash', password: 'a long password' });
  expect(accepted.status).toBe(200);
  const more = await signUp(api, 'Later'); // one more email through the same outbox, after the invitation's
  await eventually(async () => mail.received.some((m) => m.to === more.email), 20_000);
  expect(mail.received.filter((m) => m.to === email)).toHaveLength(1);

  // The launcher still stops everything cleanly.
  expect(await system.stop()).toBe(0);
  system = null;
});

it('restarts the services process of the default layout; the gateway answers 503 in the envelope meanwhile', async () => {
  system = await startSystem({ DATA_DIR: dataDir });
  expect(system.pids('services')).toHaveLength(1);
  const api = client(system.url);
  const owner = await signUp(api, 'Combined');
  const t = { token: owner.accessToken };
  const project = (await api.post('/api/v1/projects', { name: 'kept too' }, t)).body.data;

  const killed = await system.killService('services');
  const down = await api.get(`/api/v1/projects/${project.id}`, t);
  expect(down.status).toBe(503);
  expect(down.body.error.code).toBe('SERVICE_UNAVAILABLE');
  expect((await api.get('/healthz')).status).toBe(200);
  expect((await api.get('/readyz')).status).toBe(503);

  await system.restarted('services', killed);
  const back = await projectOnceBack(api, project.id, t.token);
  expect(back.status).toBe(200);
  expect(back.body.data.name).toBe('kept too');
  expect(await readyWithin(api, 5000)).toBe(200);
  expect(await system.stop()).toBe(0);
  system = null;
});

it('several gateways: gateway N listens on PORT+N-1, named in the ready line, and a SIGKILLed one comes back there', async () => {
  const [port] = await reservablePorts(2);
  system = await startSystem({ DATA_DIR: dataDir, GATEWAYS: '2', PORT: String(port) });
  const urls = [`http://127.0.0.1:${port}`, `http://127.0.0.1:${port + 1}`];
  expect(system.url).toBe(urls[0]);
  expect(system.output()).toContain(`system ready at ${urls[0]} (gateways: ${urls.join(', ')})`);
  const [first, second] = urls.map((url) => client(url));
  const owner = await signUp(first, 'Two gateways');
  expect((await second.get('/api/v1/tenant', { token: owner.accessToken })).status).toBe(200);

  // The second gateway's process (both run dist/gateway.js; the launcher names each in INSTANCE_ID).
  const [killed] = system.pids('gateway').filter((pid) => processesWith('INSTANCE_ID=gateway-2').includes(pid));
  process.kill(killed, 'SIGKILL');
  // Back at the same address: a restart keeps the port.
  await eventually(
    async () => system!.output().includes('gateway-2 restarted') && (await second.get('/readyz')).status === 200,
    60_000,
    200,
  );
  expect((await second.get('/api/v1/tenant', { token: owner.accessToken })).status).toBe(200);
  expect(await system.stop()).toBe(0);
  system = null;
});

it('stops with the address named, and leaves no process behind, when a service port is already taken', async () => {
  const holder = createServer();
  await new Promise<void>((ok) => holder.listen(0, '127.0.0.1', ok));
  const port = (holder.address() as AddressInfo).port;
  const own = mkdtempSync(join(tmpdir(), 'svc-port-taken-'));
  try {
    const failed = await startSystem({ DATA_DIR: own, IDENTITY_PORT: String(port), SVC_LAYOUT: 'per-service' }).then(
      () => new Error('started on a taken port'),
      (err: Error) => err,
    );
    expect(failed.message).toContain('system exited (1) before ready');
    expect(failed.message).toContain(`EADDRINUSE: address already in use 127.0.0.1:${port}`);
    // Every service the launcher had started is stopped with it.
    expect(processesWith(`DATA_DIR=${own}`)).toEqual([]);
  } finally {
    holder.close();
    rmSync(own, { recursive: true, force: true });
  }
});

/** Pids of this user's processes whose environment holds `entry`. */
function processesWith(entry: string): number[] {
  return readdirSync('/proc')
    .filter((pid) => /^\d+$/.test(pid))
    .filter((pid) => {
      try {
        return readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').includes(entry);
      } catch {
        return false; // gone, or not ours
      }
    })
    .map(Number);
}
