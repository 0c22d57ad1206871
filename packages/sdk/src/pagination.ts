/**
 * A list call's answer: `for await (const p of svc.projects.list())` walks every item of every page (fetched one page
 * at a time, as the loop needs them), `await svc.projects.list().page()` gets one page with its cursor.
 */
export interface Page<T> {
  data: T[];
  hasMore: boolean;
  /** Pass as `cursor` to get the next page; null on the last one. */
  nextCursor: string | null;
  requestId: string | null;
  /** The page after this one (an empty last page when there is none). */
  nextPage(): Promise<Page<T>>;
}

/** The raw answer of one page: the envelope's data and its pagination, when the list pages. */
export interface PageAnswer<T> {
  data: T[];
  nextCursor: string | null;
  requestId: string | null;
}

export class PagedList<T> implements AsyncIterable<T> {
  constructor(
    private readonly fetchPage: (cursor: string | undefined) => Promise<PageAnswer<T>>,
    private readonly cursor?: string,
  ) {}

  /** One page: the first (or the one at the `cursor` given in the query). */
  page(): Promise<Page<T>> {
    return this.load(this.cursor);
  }

  /** Every page in turn. */
  async *pages(): AsyncGenerator<Page<T>> {
    let page = await this.page();
    yield page;
    while (page.hasMore) yield (page = await page.nextPage());
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<T> {
    for await (const page of this.pages()) yield* page.data;
  }

  private async load(cursor: string | undefined): Promise<Page<T>> {
    const answer = await this.fetchPage(cursor);
    const next = answer.nextCursor;
    return {
      ...answer,
      hasMore: next !== null,
      nextPage: () => (next !== null ? this.load(next) : Promise.resolve(emptyPage<T>())),
    };
  }
}

function emptyPage<T>(): Page<T> {
  return { data: [], hasMore: false, nextCursor: null, requestId: null, nextPage: () => Promise.resolve(emptyPage<T>()) };
}
