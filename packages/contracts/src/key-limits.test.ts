import { keptKeyLimits } from './key-limits';

const limits = (credits: number) => ({ creditBudget: { credits, period: 'total' } }) as never;

test("a key's limits are asked once while fresh, per key, and again once stale", async () => {
  let clock = 0;
  const asked: string[] = [];
  let credits = 10;
  const kept = keptKeyLimits(
    async (token) => (asked.push(token), limits(credits)),
    250,
    () => clock,
  );
  const [a, b] = await Promise.all([kept('t1', 'ten_1', 'key_1'), kept('t2', 'ten_1', 'key_1')]);
  expect(a).toEqual(limits(10));
  expect(b).toEqual(limits(10));
  expect(asked).toEqual(['t1']); // the calls that asked together shared one answer
  await kept('t3', 'ten_1', 'key_2');
  expect(asked).toEqual(['t1', 't3']); // another key asks for itself
  credits = 20;
  clock = 249;
  expect(await kept('t4', 'ten_1', 'key_1')).toEqual(limits(10));
  clock = 250;
  expect(await kept('t5', 'ten_1', 'key_1')).toEqual(limits(20)); // a change counts once the answer is stale
  expect(asked).toEqual(['t1', 't3', 't5']);
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
    250,
    () => 0,
  );
  await expect(kept('t', 'ten_1', 'key_1')).rejects.toThrow('identity down');
  fail = false;
  expect(await kept('t', 'ten_1', 'key_1')).toEqual(limits(5));
  expect(asks).toBe(2);
});
