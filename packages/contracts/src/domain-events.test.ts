import { isPoison, PoisonMessageError } from '@svc/kit';
import { decodeDomainEvent, domainEvent } from './domain-events';

test("bytes that are not a domain event make every service's handler throw poison", () => {
  const good = domainEvent('svc.test.events', 'tenant.created', 'tn_1', undefined);
  expect(decodeDomainEvent(good.value).tenantId).toBe('tn_1');
  // Field 1 (the id), length-delimited, says 255 bytes follow: there are 2.
  const truncated = new Uint8Array([0x0a, 0xff, 0x01, 0x61, 0x62]);
  let thrown: unknown;
  try {
    decodeDomainEvent(truncated);
  } catch (err) {
    thrown = err;
  }
  expect(thrown).toBeInstanceOf(PoisonMessageError);
  expect(isPoison(thrown)).toBe(true);
});
