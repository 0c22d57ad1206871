import { configurePasswordHashing, hashPassword, verifyPassword } from './passwords';

const DEFAULTS = { concurrency: 2, queue: 64, perAddressQueue: 4, maxWaitMs: 3000, cost: 15 };
afterAll(() => configurePasswordHashing(DEFAULTS));

it('hashes at the configured cost, and checks every stored hash at the cost it names', async () => {
  configurePasswordHashing({ ...DEFAULTS, cost: 10 });
  const cheap = await hashPassword('correct horse battery staple');
  expect(cheap.split('$').slice(0, 4)).toEqual(['scrypt', String(2 ** 10), '8', '1']);

  configurePasswordHashing({ ...DEFAULTS, cost: 15 });
  const strong = await hashPassword('correct horse battery staple');
  expect(strong.split('$')[1]).toBe(String(2 ** 15));
  // A change of cost keeps every password valid, and wrong ones wrong.
  expect(await verifyPassword('correct horse battery staple', cheap)).toBe(true);
  expect(await verifyPassword('correct horse battery staple', strong)).toBe(true);
  expect(await verifyPassword('correct horse battery stapler', cheap)).toBe(false);
});
