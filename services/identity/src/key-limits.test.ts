import { Checks } from './validate';
import { checkLimits, mergeLimits } from './key-limits';

const set = (value: number) => ({ change: { $case: 'value' as const, value } });
const clear = { change: { $case: 'clear' as const, value: true } };

describe('mergeLimits', () => {
  it('sets, clears and keeps each field on its own', () => {
    const c = new Checks();
    const merged = mergeLimits(
      c,
      { requestsPerMinute: 5, concurrency: 2, creditBudget: { credits: 9, period: 'total' } },
      {
        tokensPerMinute: set(100),
        concurrency: clear,
        creditBudget: { change: { $case: 'value', value: { credits: 20, period: 'month' } } },
      },
    );
    c.done();
    expect(merged).toEqual({ requestsPerMinute: 5, tokensPerMinute: 100, creditBudget: { credits: 20, period: 'month' } });
    expect(mergeLimits(new Checks(), merged, { creditBudget: clear, requestsPerMinute: clear })).toEqual({ tokensPerMinute: 100 });
  });

  it('names every bad field', () => {
    const c = new Checks();
    mergeLimits(c, {}, { requestsPerMinute: set(0), creditBudget: { change: { $case: 'value', value: { credits: 0, period: 'week' } } } });
    checkLimits(c, { concurrency: 10_001 });
    let fields: string[] = [];
    try {
      c.done();
    } catch (err: any) {
      fields = err.details.fields.map((f: { field: string }) => f.field);
    }
    expect(fields).toEqual(['limits.requestsPerMinute', 'limits.creditBudget.credits', 'limits.creditBudget.period', 'limits.concurrency']);
  });
});
