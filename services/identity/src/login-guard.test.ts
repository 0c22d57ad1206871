import { AppError } from '@svc/kit';
import { FailureThrottle, HashGate } from './login-guard';

describe('HashGate', () => {
  it('runs at most `concurrency` at once, queues up to `queue`, and refuses the rest at once', async () => {
    const gate = new HashGate(2, 3, 10);
    let running = 0;
    let peak = 0;
    const release: Array<() => void> = [];
    const work = () =>
      new Promise<void>((resolve) => {
        running++;
        peak = Math.max(peak, running);
        release.push(() => {
          running--;
          resolve();
        });
      });
    const admitted = Array.from({ length: 5 }, (_, i) => gate.run(`10.0.0.${i}`, work));
    const refused = await gate.run('10.0.0.9', work).catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(AppError);
    expect(refused).toMatchObject({ code: 'SERVICE_UNAVAILABLE', details: { reason: 'password_check_busy', retryAfterS: 1 } });
    while (release.length || running) {
      await new Promise((r) => setImmediate(r));
      release.shift()?.();
    }
    await Promise.all(admitted);
    expect(peak).toBe(2);
  });
  it("serves addresses in turn: one address's burst delays another by at most one hash per waiting address", async () => {
    const gate = new HashGate(1, 100, 100);
    const order: string[] = [];
    let release: (() => void) | null = null;
    const work = (tag: string) => () =>
      new Promise<void>((resolve) => {
        order.push(tag);
        release = resolve;
      });
    const all = [gate.run('attacker', work('a0'))];
    for (let i = 1; i <= 5; i++) all.push(gate.run('attacker', work(`a${i}`)));
    all.push(gate.run('user', work('user')));
    while (order.length < 7) {
      await new Promise((r) => setImmediate(r));
      const r = release as (() => void) | null;
      release = null;
      r?.();
    }
    await Promise.all(all);
    expect(order.indexOf('user')).toBeLessThanOrEqual(2);
  });

  it('refuses an address past its own queue while others still get in line', async () => {
    const gate = new HashGate(1, 100, 2);
    let open: () => void = () => undefined;
    const hold = () => new Promise<void>((resolve) => (open = resolve));
    const first = gate.run('a', hold);
    const queued = [gate.run('a', async () => undefined), gate.run('a', async () => undefined)];
    await expect(gate.run('a', async () => undefined)).rejects.toMatchObject({ code: 'SERVICE_UNAVAILABLE' });
    const other = gate.run('b', async () => 'b got in');
    open();
    await Promise.all([first, ...queued]);
    await expect(other).resolves.toBe('b got in');
  });
  it('lets a waiter give up after maxWaitMs with a 503, so no queue outlasts the deadline', async () => {
    const gate = new HashGate(1, 100, 100, 50);
    let open: () => void = () => undefined;
    const first = gate.run('a', () => new Promise<void>((resolve) => (open = resolve)));
    await expect(gate.run('b', async () => 'never')).rejects.toMatchObject({ code: 'SERVICE_UNAVAILABLE' });
    open();
    await first;
    // The line is empty again: the next caller runs at once.
    await expect(gate.run('c', async () => 'ran')).resolves.toBe('ran');
  });
});

describe('FailureThrottle', () => {
  const limits = { perAddress: 5, perAccountAddress: 2, windowMs: 60_000, maxEntries: 1000 };

  it("refuses an (account, address) pair past its limit, but not the account's owner elsewhere, and forgives after the window", () => {
    let now = 0;
    const t = new FailureThrottle(limits, () => now);
    t.begin('victim@example.com', '203.0.113.9');
    t.begin('victim@example.com', '203.0.113.9');
    expect(() => t.begin('victim@example.com', '203.0.113.9')).toThrow(expect.objectContaining({ code: 'RATE_LIMIT_EXCEEDED' }));
    // The real user, from their own address, is not slowed down by the attacker.
    expect(() => t.begin('victim@example.com', '198.51.100.7')).not.toThrow();
    now += 60_001;
    expect(() => t.begin('victim@example.com', '203.0.113.9')).not.toThrow();
  });

  it('caps attempts per address across accounts; a success gives its attempt back', () => {
    const t = new FailureThrottle(limits, () => 0);
    for (let i = 0; i < 4; i++) t.begin(`u${i}@example.com`, '203.0.113.9');
    const ok = t.begin('u4@example.com', '203.0.113.9');
    expect(() => t.begin('u5@example.com', '203.0.113.9')).toThrow(
      expect.objectContaining({ details: expect.objectContaining({ retryAfterS: 60 }) }),
    );
    ok();
    expect(() => t.begin('u5@example.com', '203.0.113.9')).not.toThrow();
  });

  it('keeps memory bounded under a spray of addresses', () => {
    const t = new FailureThrottle({ ...limits, maxEntries: 100 }, () => 0);
    for (let i = 0; i < 10_000; i++) t.begin('x@example.com', `10.0.${i >> 8}.${i & 255}`);
    expect((t as unknown as { windows: Map<string, unknown> }).windows.size).toBeLessThanOrEqual(100);
  });
});
