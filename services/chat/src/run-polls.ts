/**
 * One poll per agent run in this process, whoever follows it: every reply that reports a run (the response that
 * started it and each follower) reads the states of that one loop, instead of asking agents every CHAT_POLL_MS each.
 * The loop runs while someone follows, with the token of the latest follower still there (they share a tenant).
 */
import type { agentsV1 } from '@svc/proto';
import { sleep } from './calls/records';

type Read = { run: agentsV1.Run } | { err: unknown };
type GetRun = (agentId: string, runId: string, token: string) => Promise<agentsV1.Run>;

interface Poll {
  agentId: string;
  runId: string;
  /** Each follower's token, by follower. */
  followers: Map<object, string>;
  /** Settled by the next read. */
  next: Promise<Read>;
  settle: (r: Read) => void;
}

export class RunPolls {
  private readonly polls = new Map<string, Poll>();

  constructor(
    private readonly getRun: GetRun,
    private readonly pollMs: number,
  ) {}

  /** Polls under way (for tests and metrics). */
  get size(): number {
    return this.polls.size;
  }

  /** Each state of the run read from now on, until the caller stops (returns) or `signal` aborts. */
  async *states(tenantId: string, agentId: string, runId: string, token: string, signal: AbortSignal): AsyncIterable<agentsV1.Run> {
    const key = `${tenantId}/${runId}`;
    let poll = this.polls.get(key);
    const me = {};
    if (!poll) {
      poll = { agentId, runId, followers: new Map([[me, token]]), ...pending() };
      this.polls.set(key, poll);
      void this.loop(key, poll);
    } else poll.followers.set(me, token);
    const stopped = new Promise<null>((resolve) => signal.addEventListener('abort', () => resolve(null), { once: true }));
    try {
      while (!signal.aborted) {
        const read = await Promise.race([poll.next, stopped]);
        if (!read) return;
        if ('err' in read) throw read.err;
        yield read.run;
      }
    } finally {
      poll.followers.delete(me);
    }
  }

  private async loop(key: string, poll: Poll): Promise<void> {
    const idle = new AbortController().signal;
    while (poll.followers.size > 0) {
      const token = [...poll.followers.values()].at(-1)!;
      const read: Read = await this.getRun(poll.agentId, poll.runId, token).then(
        (run) => ({ run }),
        (err: unknown) => ({ err }),
      );
      const { settle } = poll;
      Object.assign(poll, pending());
      settle(read);
      // The followers take this read (and leave on an end) before the next is due.
      await sleep(this.pollMs, idle);
    }
    this.polls.delete(key);
  }
}

function pending(): Pick<Poll, 'next' | 'settle'> {
  let settle!: (r: Read) => void;
  const next = new Promise<Read>((resolve) => (settle = resolve));
  return { next, settle };
}
