import { CircuitBreaker } from './breaker';

function breaker(failures = 3, windowMs = 60_000, cooldownMs = 30_000) {
  let now = 1_000;
  const b = new CircuitBreaker({ failures, windowMs, cooldownMs, now: () => now });
  return { b, advance: (ms: number) => (now += ms) };
}

test('opens after N failures within the window (the failure that opens it says so), and refuses with the time left', () => {
  const { b, advance } = breaker(3);
  expect(b.failure('k')).toBe(false);
  expect(b.failure('k')).toBe(false);
  expect(b.admit('k')).toEqual({ allowed: true, trial: false });
  expect(b.failure('k')).toBe(true); // counted as svc_llm_breaker_opened_total
  expect(b.state('k')).toBe('open');
  advance(10_000);
  expect(b.admit('k')).toEqual({ allowed: false, retryAfterMs: 20_000 });
  expect(b.wouldAdmit('k')).toBe(false);
  // Other deployments are not affected.
  expect(b.admit('other')).toEqual({ allowed: true, trial: false });
});

test('failures older than the window do not count', () => {
  const { b, advance } = breaker(3, 60_000);
  b.failure('k');
  b.failure('k');
  advance(60_000);
  b.failure('k');
  expect(b.state('k')).toBe('closed');
  b.failure('k');
  b.failure('k');
  expect(b.state('k')).toBe('open');
});

test('a success closes the circuit and forgets earlier failures', () => {
  const { b } = breaker(3);
  b.failure('k');
  b.failure('k');
  b.success('k');
  b.failure('k');
  b.failure('k');
  expect(b.state('k')).toBe('closed');
});

test('half-opens after the cooldown: exactly one trial, closed by its success', () => {
  const { b, advance } = breaker(1, 60_000, 30_000);
  b.failure('k');
  advance(29_999);
  expect(b.admit('k').allowed).toBe(false);
  advance(1);
  expect(b.state('k')).toBe('half_open');
  expect(b.wouldAdmit('k')).toBe(true);
  expect(b.admit('k')).toEqual({ allowed: true, trial: true });
  // While the trial is out, every other call is still skipped.
  expect(b.admit('k').allowed).toBe(false);
  expect(b.wouldAdmit('k')).toBe(false);
  b.success('k');
  expect(b.state('k')).toBe('closed');
  expect(b.admit('k')).toEqual({ allowed: true, trial: false });
});

test('a failed trial opens the circuit for another cooldown; a released trial lets the next caller try', () => {
  const { b, advance } = breaker(2, 60_000, 5_000);
  b.failure('k');
  b.failure('k');
  advance(5_000);
  expect(b.admit('k')).toEqual({ allowed: true, trial: true });
  b.failure('k');
  expect(b.state('k')).toBe('open');
  expect(b.admit('k')).toEqual({ allowed: false, retryAfterMs: 5_000 });
  advance(5_000);
  expect(b.admit('k').allowed).toBe(true);
  b.release('k');
  expect(b.admit('k')).toEqual({ allowed: true, trial: true });
});

test('refuses impossible settings', () => {
  expect(() => new CircuitBreaker({ failures: 0, windowMs: 1, cooldownMs: 1 })).toThrow();
});
