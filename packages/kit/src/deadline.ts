/**
 * `work`, or a rejection with `message` once `ms` have passed. The work itself is left to finish or fail on its own
 * (a late failure is swallowed: nobody waits for it any more).
 */
export async function withDeadline<T>(work: Promise<T>, ms: number, message: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  work.catch(() => {});
  try {
    return await Promise.race([
      work,
      new Promise<never>((_, fail) => {
        timer = setTimeout(() => fail(new Error(message)), ms);
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
