import { AppError } from '@svc/kit';
import type { MessageDoc } from './collections';
import { LiveReply } from './live';
import { parseEventId, resumeFrom } from './stream';

describe('LiveReply', () => {
  it('keeps the deltas as sent and finds where an offset falls', () => {
    const live = new LiveReply('msg_1');
    for (const d of ['Hel', '', 'lo, ', 'wor', 'ld']) live.append(d);
    expect(live.chunks).toEqual(['Hel', 'lo, ', 'wor', 'ld']);
    expect(live.ends).toEqual([3, 7, 10, 12]);
    expect(live.text()).toBe('Hello, world');
    expect([0, 2, 3, 6, 7, 11, 12, 99].map((o) => live.indexAfter(o))).toEqual([0, 0, 1, 1, 2, 3, 4, 4]);
  });

  it("lets readers send a stored reply's chunks once stored, and once final only those it kept", () => {
    const stored = new LiveReply('msg_1', true);
    for (const d of ['a', 'bc', 'def']) stored.append(d);
    expect(stored.sendable()).toBe(0);
    stored.markDurable(2);
    expect(stored.sendable()).toBe(2);
    // Failed by another process with the text it had stored: the chunk past it is never sent.
    stored.finish({ content: 'abc' } as MessageDoc);
    expect(stored.sendable()).toBe(2);
    const unstored = new LiveReply('msg_2');
    for (const d of ['a', 'bc']) unstored.append(d);
    expect(unstored.sendable()).toBe(2);
  });

  it('wakes waiters on append and on finish, and on abort', async () => {
    const live = new LiveReply('msg_1');
    const abort = new AbortController();
    const woken = live.changed(abort.signal);
    live.append('x');
    await woken;
    const aborted = live.changed(abort.signal);
    abort.abort();
    await aborted;
    expect(live.length).toBe(1);
  });
});

describe('event ids', () => {
  it('parses <messageId>:<offset>[:end] and resumes only the same reply', () => {
    expect(parseEventId('')).toBeNull();
    const after = parseEventId('msg_abc:42');
    expect(after).toEqual({ messageId: 'msg_abc', offset: 42, end: false });
    expect(resumeFrom(after, 'msg_abc')).toEqual({ offset: 42, end: false });
    expect(resumeFrom(after, 'msg_newer')).toEqual({ offset: 0, end: false });
    expect(resumeFrom(parseEventId('msg_abc:42:end'), 'msg_abc')).toEqual({ offset: 42, end: true });
    for (const bad of ['nonsense', 'msg:-1', 'msg:1:done', ':5', 'msg:12345678901']) expect(() => parseEventId(bad)).toThrow(AppError);
  });
});
