/**
 * A service's server-streaming call as the gateway reads it, ended one of two ways:
 * - `release()` once its final event has been read: the service ends the call itself a moment later, so the rest
 *   is read (in the background) instead of cancelling it;
 * - `cancel()` when it is given up before its end (the client went away, the gateway is closing).
 *
 * Why not cancel in both cases: a cancel before the service's end crosses the wire as an HTTP/2 RST_STREAM, and
 * Node's HTTP/2 server (nghttp2's rapid-reset guard, CVE-2023-44487) closes the whole connection with
 * GOAWAY(INTERNAL_ERROR) once it has received more than 1,000 of them at over 33 a second. Every call then in flight
 * on that connection, of any tenant, fails with INTERNAL: at a few hundred finished calls a second that was 1-2% of
 * them answered 500 (issue 36). Once either has been called, the other does nothing.
 */
export interface CallStream<T> extends AsyncIterable<T> {
  release(): void;
  cancel(): void;
}

export function callStream<T>(stream: AsyncIterable<T> & { cancel(): void }): CallStream<T> {
  let reader: AsyncIterator<T> | null = null;
  let ended = false;
  return {
    [Symbol.asyncIterator]() {
      reader = stream[Symbol.asyncIterator]();
      return reader;
    },
    release() {
      if (ended) return;
      ended = true;
      if (!reader) return stream.cancel();
      // Nothing should follow the final event: anything that does is not waited for.
      reader.next().then(
        (next) => {
          if (!next.done) stream.cancel();
        },
        () => undefined,
      );
    },
    cancel() {
      if (ended) return;
      ended = true;
      stream.cancel();
    },
  };
}
