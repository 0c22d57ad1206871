import { promptTokenBound, TOKENIZE_MAX_BYTES } from './credits';

describe('promptTokenBound', () => {
  it("counts a known model's prompt with its tokenizer", () => {
    // "Hello world, this is a prompt." is 8 tokens in o200k_base and in cl100k_base.
    expect(promptTokenBound('Hello world, this is a prompt.', 'gpt-4o-mini')).toBe(8);
    expect(promptTokenBound('Hello world, this is a prompt.', 'gpt-3.5-turbo')).toBe(8);
  });

  it('bounds an unknown model by UTF-8 bytes', () => {
    expect(promptTokenBound('Hello world', 'claude-x')).toBe(11);
    expect(promptTokenBound('漢字', '')).toBe(6);
    expect(promptTokenBound('')).toBe(0);
  });

  it('is never below the tokens of CJK text, which 4 characters a token undercounts', () => {
    const cjk = '漢字仮名交じり文'.repeat(7500); // 60,000 characters: ~67,500 tokens in o200k_base
    expect(promptTokenBound(cjk, 'gpt-4o')).toBeGreaterThanOrEqual(67_500);
    expect(promptTokenBound(cjk, 'gpt-4o')).toBe(Buffer.byteLength(cjk));
    // Small enough to tokenize: the long run of letters counts as its bytes, still an upper bound.
    const short = '漢字仮名交じり文'.repeat(30);
    expect(promptTokenBound(short, 'gpt-4o')).toBeGreaterThanOrEqual(Math.ceil(short.length * 1.1));
  });

  it('counts a large prompt by its bytes', () => {
    const big = 'word '.repeat(TOKENIZE_MAX_BYTES);
    expect(promptTokenBound(big, 'gpt-4o')).toBe(big.length);
  });
});
