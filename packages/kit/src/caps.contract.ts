/**
 * What an exact cap promises, on any store engine: run by caps.test.ts on SQLite and by mongo.test.ts on MongoDB.
 * `open` gives two stores on the same data, as two replicas of a service have.
 */
import { AppError, errors } from './errors';
import { capCounters, TenantCap, type CapDef } from './caps';
import { DuplicateKeyError, type CollectionDef, type Store } from './storage';

interface Item {
  id: string;
  tenantId: string;
  name?: string;
  createdAt: string;
}

export function capsContract(engine: string, open: () => Promise<[Store, Store]>): void {
  describe(`exact caps on ${engine}`, () => {
    let stores: [Store, Store];
    let n = 0;
    let items: CollectionDef<Item>;

    beforeEach(async () => {
      stores = await open();
      items = { name: `items_${++n}`, indexes: [{ fields: ['tenantId'] }, { fields: ['tenantId', 'name'], unique: true }] };
      for (const s of stores) {
        await s.ensure(items);
        await s.ensure(capCounters);
      }
    });
    afterEach(async () => {
      for (const s of new Set(stores)) await s.close();
    });

    const def = (limit: number, extra: Partial<CapDef> = {}): CapDef => ({
      kind: 'item',
      plural: 'items',
      limit,
      count: (tx, tenantId) => tx.collection(items).count({ tenantId }),
      ...extra,
    });
    const item = (tenantId: string, name?: string): Item => ({
      id: `i_${Math.random().toString(36).slice(2)}`,
      tenantId,
      name,
      createdAt: new Date().toISOString(),
    });
    /** Creates through the cap of replica `r`; the outcome as a word. */
    const create = (caps: TenantCap[], r: number, tenantId: string, name?: string) =>
      caps[r]
        .transaction(tenantId, async (tx, places) => {
          await places.take();
          await tx.collection(items).insert(item(tenantId, name));
        })
        .then(
          () => 'created',
          (err: unknown) => {
            if (err instanceof AppError && err.details.reason === 'item_limit') return 'refused';
            throw err;
          },
        );
    const remove = (cap: TenantCap, tenantId: string, id: string) =>
      cap.transaction(tenantId, async (tx, places) => {
        if (await tx.collection(items).delete(id, { tenantId })) await places.free();
      });

    test('50 concurrent creates through both stores at limit - 1: exactly one passes', async () => {
      const caps = stores.map((s) => new TenantCap(s, def(10)));
      for (let i = 0; i < 9; i++) expect(await create(caps, i % 2, 't1')).toBe('created');
      const outcomes = await Promise.all(Array.from({ length: 50 }, (_, i) => create(caps, i % 2, 't1')));
      expect(outcomes.filter((o) => o === 'created')).toHaveLength(1);
      expect(await stores[0].collection(items).count({ tenantId: 't1' })).toBe(10);
      expect(await caps[1].used('t1')).toBe(10);
      // Another tenant has places of its own.
      expect(await create(caps, 0, 't2')).toBe('created');
    });

    test('a tenant with data and no counter yet: the counter starts from the data, exactly, under concurrent creates', async () => {
      for (let i = 0; i < 3; i++) await stores[0].collection(items).insert(item('t1'));
      const caps = stores.map((s) => new TenantCap(s, def(5)));
      expect(await caps[0].used('t1')).toBeNull();
      const outcomes = await Promise.all(Array.from({ length: 20 }, (_, i) => create(caps, i % 2, 't1')));
      expect(outcomes.filter((o) => o === 'created')).toHaveLength(2);
      expect(await stores[1].collection(items).count({ tenantId: 't1' })).toBe(5);
      expect(await caps[0].used('t1')).toBe(5);
    });

    test('a delete frees a place, also as the first write of a tenant without a counter', async () => {
      const first = item('t1');
      await stores[0].collection(items).insert(first);
      await stores[0].collection(items).insert(item('t1'));
      const caps = stores.map((s) => new TenantCap(s, def(2)));
      await remove(caps[1], 't1', first.id);
      expect(await caps[0].used('t1')).toBe(1);
      expect(await create(caps, 0, 't1')).toBe('created');
      expect(await create(caps, 1, 't1')).toBe('refused');
      // Deleting nothing frees nothing.
      await remove(caps[0], 't1', 'i_missing');
      expect(await caps[0].used('t1')).toBe(2);
      const [last] = (await stores[0].collection(items).find({ tenantId: 't1' }, { limit: 1 })).items;
      await remove(caps[0], 't1', last.id);
      expect(await create(caps, 1, 't1')).toBe('created');
      expect(await caps[1].used('t1')).toBe(2);
    });

    test('a create whose insert fails takes no place; the refusal names the cap', async () => {
      const caps = stores.map((s) => new TenantCap(s, def(2)));
      expect(await create(caps, 0, 't1', 'same')).toBe('created');
      await expect(create(caps, 1, 't1', 'same')).rejects.toBeInstanceOf(DuplicateKeyError);
      expect(await caps[0].used('t1')).toBe(1);
      expect(await create(caps, 1, 't1')).toBe('created');
      const refusal = caps[0].transaction('t1', (_tx, places) => places.take());
      await expect(refusal).rejects.toMatchObject({ code: 'CONFLICT', details: { reason: 'item_limit', limit: 2 } });
      const custom = new TenantCap(stores[0], def(2, { refuse: (limit) => errors.badRequest('too_many_items', 'no', { limit }) }));
      await expect(custom.transaction('t1', (_tx, places) => places.take())).rejects.toMatchObject({
        code: 'VALIDATION_ERROR',
        details: { reason: 'too_many_items', limit: 2 },
      });
      expect(await caps[0].used('t1')).toBe(2);
    });
  });
}
