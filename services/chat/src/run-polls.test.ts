import type { agentsV1 } from '@svc/proto';
import { RunPolls } from './run-polls';

it('reads a run once per poll however many replies follow it, and stops polling when they leave', async () => {
  const statuses = ['running', 'running', 'completed'];
  let reads = 0;
  const getRun = async () => ({ id: 'run_1', status: statuses[Math.min(reads++, statuses.length - 1)] }) as agentsV1.Run;
  const polls = new RunPolls(getRun, 10);
  const follow = async () => {
    const seen: string[] = [];
    for await (const run of polls.states('ten_1', 'agt_1', 'run_1', 'token', new AbortController().signal)) {
      seen.push(run.status);
      if (run.status === 'completed') break;
    }
    return seen;
  };
  const followers = await Promise.all(Array.from({ length: 100 }, follow));
  expect(followers.every((seen) => seen.at(-1) === 'completed')).toBe(true);
  // One loop for the hundred: three reads, the last of them the end.
  expect(reads).toBe(3);
  while (polls.size > 0) await new Promise((r) => setTimeout(r, 5));
  expect(reads).toBe(3);
});

it('ends a follower when its signal aborts, and hands it a failed read', async () => {
  const polls = new RunPolls(async () => Promise.reject(new Error('agents unavailable')), 10);
  const states = polls.states('ten_1', 'agt_1', 'run_1', 'token', new AbortController().signal);
  await expect(
    (async () => {
      for await (const _ of states) void _;
    })(),
  ).rejects.toThrow('agents unavailable');
  const stop = new AbortController();
  const idle = new RunPolls(() => new Promise<agentsV1.Run>(() => undefined), 10);
  const waiting = (async () => {
    for await (const _ of idle.states('ten_1', 'agt_1', 'run_2', 'token', stop.signal)) void _;
    return 'stopped';
  })();
  stop.abort();
  await expect(waiting).resolves.toBe('stopped');
});
