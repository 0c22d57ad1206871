import { MemoryRateLimiter } from './rate-limiter';

describe('MemoryRateLimiter.hitCapped', () => {
  it('admits exactly max in a window, does not count refusals, and peeks the count', async () => {
    const limiter = new MemoryRateLimiter(1000, 60);
    const decisions = Array.from({ length: 8 }, () => limiter.hitCappedSync('k:key_1', 3, 60));
    expect(decisions.map((d) => d.allowed)).toEqual([true, true, true, false, false, false, false, false]);
    expect(decisions.map((d) => d.remaining)).toEqual([2, 1, 0, 0, 0, 0, 0, 0]);
    expect(await limiter.peek('k:key_1', 60)).toBe(3);
    // A raised limit admits the difference at once: refusals left nothing behind.
    expect(limiter.hitCappedSync('k:key_1', 4, 60).allowed).toBe(true);
    expect(limiter.hitCappedSync('k:key_1', 4, 60).allowed).toBe(false);
    expect(await limiter.peek('k:key_2', 60)).toBe(0);
  });
});
