import { keptKeyLimits } from './key-limits';

const limits = (credits: number) => ({ creditBudget: { credits, period: 'total' } }) as never;

/** An identity whose answers the test hands out one by one. */
function identity() {
  const asked: Array<{ token: string; answer: (credits: number) => void; fail: (err: Error) => void }> = [];
  const ask = (token: string) =>
    new Promise<never>((resolve, reject) => {
      asked.push({ token, answer: (credits) => resolve(limits(credits)), fail: reject });
    });
  return { asked, ask };
}

const settle = () => new Promise((r) => setImmediate(r));

/**
 * A kept view (soft 250 ms, hard 500 ms) on the test's clock, over an identity answered by hand, holding key_1's first
 * answer (1 credit, asked as t1 at time 0). `clock.now` moves time.
 */
async function keptWithFirstAnswer(onRefreshError?: (err: unknown) => void) {
  const clock = { now: 0 };
  const { asked, ask } = identity();
  const kept = keptKeyLimits(ask, { softMs: 250, hardMs: 500, now: () => clock.now, onRefreshError });
  const first = kept('t1', 'ten_1', 'key_1');
  asked[0].answer(1);
  const firstAnswer = await first;
  return { clock, asked, kept, firstAnswer };
}

test("a key's limits are asked once while fresh, per key, and again once stale", async () => {
  let clock = 0;
  const asked: string[] = [];
  let credits = 10;
  const kept = keptKeyLimits(async (token) => (asked.push(token), limits(credits)), { softMs: 250, hardMs: 500, now: () => clock });
  const [a, b] = await Promise.all([kept('t1', 'ten_1', 'key_1'), kept('t2', 'ten_1', 'key_1')]);
  expect(a).toEqual(limits(10));
  expect(b).toEqual(limits(10));
  expect(asked).toEqual(['t1']); // the calls that asked together shared one answer
  await kept('t3', 'ten_1', 'key_2');
  expect(asked).toEqual(['t1', 't3']); // another key asks for itself
  credits = 20;
  clock = 249;
  expect(await kept('t4', 'ten_1', 'key_1')).toEqual(limits(10));
  expect(asked).toEqual(['t1', 't3']);
  clock = 250;
  // Past the soft age: the kept answer is served at once, and one question goes in the background.
  const [c, d] = [kept('t5', 'ten_1', 'key_1'), kept('t6', 'ten_1', 'key_1')];
  expect(await c).toEqual(limits(10));
  expect(await d).toEqual(limits(10));
  expect(asked).toEqual(['t1', 't3', 't5']);
  await settle();
  expect(await kept('t7', 'ten_1', 'key_1')).toEqual(limits(20)); // the refreshed answer, without waiting
  expect(asked).toEqual(['t1', 't3', 't5']);
});

test('a busy key never waits: the refresh is in the background, and its answer is aged from when it was asked', async () => {
  const { clock, asked, kept, firstAnswer } = await keptWithFirstAnswer();
  let answered = 1;
  expect(firstAnswer).toEqual(limits(1));
  for (let step = 1; step <= 40; step++) {
    clock.now = step * 100;
    let served = false;
    void kept(`t${step}`, 'ten_1', 'key_1').then(() => (served = true));
    await Promise.resolve();
    await Promise.resolve();
    expect(served).toBe(true); // answered from what was kept, never after a question to identity
    // identity answers every question 50 ms after it was sent (in the test's time: before the next step)
    if (asked.length > answered) {
      asked[answered++].answer(step);
      await settle();
    }
  }
  // One question per soft age (every third step of 100 ms), not one per call.
  expect(asked.length).toBeLessThanOrEqual(1 + Math.ceil(4000 / 250));
  expect(asked.length).toBeGreaterThanOrEqual(4000 / 300);
});

test('an answer older than the hard age is never served: the call waits for a new one', async () => {
  const { clock, asked, kept } = await keptWithFirstAnswer();
  clock.now = 499;
  expect(await kept('t2', 'ten_1', 'key_1')).toEqual(limits(1)); // served; a refresh is asked
  expect(asked).toHaveLength(2);
  clock.now = 500;
  // The refresh (asked at 499) is still out: the call waits for it rather than take the answer of 0.
  let got: unknown;
  const waiting = kept('t3', 'ten_1', 'key_1').then((v) => (got = v));
  await settle();
  expect(got).toBeUndefined();
  expect(asked).toHaveLength(2); // single flight: it waits on the refresh in flight
  asked[1].answer(2);
  await waiting;
  expect(got).toEqual(limits(2));
  // A question asked more than the hard age ago is not waited on: its answer could not be served.
  clock.now = 1100;
  const late = kept('t4', 'ten_1', 'key_1');
  expect(asked).toHaveLength(3);
  clock.now = 1700;
  const later = kept('t5', 'ten_1', 'key_1');
  expect(asked).toHaveLength(4);
  asked[3].answer(4);
  expect(await later).toEqual(limits(4));
  asked[2].answer(3); // the older question's answer comes last: it does not replace the newer one
  expect(await late).toEqual(limits(3));
  await settle();
  expect(await kept('t6', 'ten_1', 'key_1')).toEqual(limits(4));
});

test('concurrent calls of a key with nothing kept share one question', async () => {
  const { asked, ask } = identity();
  const kept = keptKeyLimits(ask, { now: () => 0 });
  const calls = Array.from({ length: 20 }, (_, i) => kept(`t${i}`, 'ten_1', 'key_1'));
  expect(asked).toHaveLength(1);
  asked[0].answer(7);
  expect(await Promise.all(calls)).toEqual(Array.from({ length: 20 }, () => limits(7)));
});

test('a failed answer is not kept: the next call asks again', async () => {
  let fail = true;
  let asks = 0;
  const kept = keptKeyLimits(
    async () => {
      asks++;
      if (fail) throw new Error('identity down');
      return limits(5);
    },
    { now: () => 0 },
  );
  await expect(kept('t', 'ten_1', 'key_1')).rejects.toThrow('identity down');
  fail = false;
  expect(await kept('t', 'ten_1', 'key_1')).toEqual(limits(5));
  expect(asks).toBe(2);
});

test('a failed refresh keeps the older answer until its hard age, then the call waits and gets the error', async () => {
  const refreshErrors: unknown[] = [];
  const { clock, asked, kept } = await keptWithFirstAnswer((err) => refreshErrors.push(err));
  clock.now = 300;
  expect(await kept('t2', 'ten_1', 'key_1')).toEqual(limits(1));
  asked[1].fail(new Error('identity down'));
  await settle();
  expect(refreshErrors).toHaveLength(1);
  clock.now = 400;
  expect(await kept('t3', 'ten_1', 'key_1')).toEqual(limits(1)); // not poisoned; asks again in the background
  expect(asked).toHaveLength(3);
  asked[2].fail(new Error('identity down'));
  await settle();
  clock.now = 500;
  const late = kept('t4', 'ten_1', 'key_1');
  expect(asked).toHaveLength(4);
  asked[3].fail(new Error('identity down'));
  await expect(late).rejects.toThrow('identity down'); // nothing older than the hard age is served
  clock.now = 600;
  const back = kept('t5', 'ten_1', 'key_1');
  asked[4].answer(9);
  expect(await back).toEqual(limits(9));
});

test('at most maxKeys keys are kept, the one answered longest ago going first', async () => {
  let clock = 0;
  let asks = 0;
  const kept = keptKeyLimits(async () => (asks++, limits(1)), { softMs: 250, hardMs: 500, maxKeys: 3, now: () => clock });
  for (const key of ['a', 'b', 'c']) await kept('t', 'ten_1', key);
  expect(asks).toBe(3);
  clock = 300;
  await kept('t', 'ten_1', 'a'); // refreshed in the background: now the newest
  await settle();
  expect(asks).toBe(4);
  await kept('t', 'ten_1', 'd'); // b goes
  expect(asks).toBe(5);
  await kept('t', 'ten_1', 'a');
  await kept('t', 'ten_1', 'd');
  expect(asks).toBe(5); // still kept
  await kept('t', 'ten_1', 'b'); // asked again: it had gone
  expect(asks).toBe(6);
});
