import { isPoison, PoisonMessageError } from './poison';

test('a PoisonMessageError, or any error marked poison, is poison; anything else is an unavailable dependency', () => {
  expect(isPoison(new PoisonMessageError('bad'))).toBe(true);
  expect(isPoison(Object.assign(new Error('bad'), { poison: true }))).toBe(true); // another copy of the class
  expect(isPoison(new Error('connect ECONNREFUSED'))).toBe(false);
  expect(isPoison(Object.assign(new Error('deadline'), { code: 4 }))).toBe(false);
  expect(isPoison(undefined)).toBe(false);
  expect(isPoison('poison')).toBe(false);
});
