import type { MessageDoc } from './collections';

/**
 * A reply being generated in this process, kept in memory so that live readers get each delta as it arrives
 * without waiting on the store. Deltas are kept as the provider sent them (a reader that is behind sends them one
 * by one, never reordered or merged); the text is shared by every reader, so a slow reader costs no copy.
 */
export class LiveReply {
  readonly chunks: string[] = [];
  /** ends[i] = length of the text after chunks[i] (UTF-16 code units). */
  readonly ends: number[] = [];
  length = 0;
  /** The model serving the reply, once one answers (a fallback's when the first failed before its first token). */
  served = '';
  /** Chunks written to the store (replies whose streams resume by chunk write each before any reader sends it). */
  durable = 0;
  /** The stored message once the reply is completed or failed. */
  final: MessageDoc | null = null;
  private waiters = new Set<() => void>();
  private joined = '';
  private joinedChunks = 0;

  /**
   * `stored`: readers send a chunk only once it is in the store (a durable reply), so a reader resuming after a crash
   * finds again every chunk it was sent, in any process.
   */
  constructor(
    readonly messageId: string,
    readonly stored = false,
  ) {}

  /** How many chunks readers may send now: those stored (a stored reply), else all; once final, those it kept. */
  sendable(): number {
    if (this.final) return this.indexAfter(this.final.content.length);
    return this.stored ? this.durable : this.chunks.length;
  }

  append(delta: string): void {
    if (delta === '') return;
    this.chunks.push(delta);
    this.length += delta.length;
    this.ends.push(this.length);
    this.wake();
  }

  /** The first `chunks` chunks are in the store. */
  markDurable(chunks: number): void {
    if (chunks <= this.durable) return;
    this.durable = chunks;
    this.wake();
  }

  finish(doc: MessageDoc): void {
    this.final = doc;
    this.wake();
  }

  /** The whole text so far (joined lazily: only the store writes need it). */
  text(): string {
    if (this.joinedChunks < this.chunks.length) {
      this.joined += this.chunks.slice(this.joinedChunks).join('');
      this.joinedChunks = this.chunks.length;
    }
    return this.joined;
  }

  /** Index of the first chunk that ends after `offset` (binary search). */
  indexAfter(offset: number): number {
    let lo = 0;
    let hi = this.ends.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (this.ends[mid] <= offset) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  /** Resolves on the next append or finish, or when `signal` aborts. Check state before calling. */
  changed(signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      if (signal.aborted) return resolve();
      const done = () => {
        this.waiters.delete(done);
        signal.removeEventListener('abort', done);
        resolve();
      };
      this.waiters.add(done);
      signal.addEventListener('abort', done, { once: true });
    });
  }

  private wake(): void {
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const w of waiters) w();
  }
}
