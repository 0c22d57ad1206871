import type * as grpc from '@grpc/grpc-js';
import { STOP_ON_HALF_CLOSE_KEY } from './server';

/**
 * How long a stream asked to end (`cancel`), or read to its final message (`release`), has to end on the service's
 * side before it is cancelled outright (an RST_STREAM: a service that ignored the half-close).
 */
export const STREAM_END_WAIT_MS = 5_000;
/**
 * How long a service has to say (in its response headers, sent at once) that it ends a stream on the client's
 * half-close. A service from before the convention (grpc-js serving a server-streaming method) runs its handler only
 * after the half-close and answers nothing until then: past this wait it is given the half-close, as gRPC's server
 * streaming has it, and a stream to it is ended by a cancel, as before. Long, because a service of today that is slow
 * to answer (a stalled event loop under load) would read that half-close as a stop and end the stream early; only a
 * stream to an old service during a rolling deploy pays the wait.
 */
export const STREAM_HEADERS_WAIT_MS = 10_000;

type Duplex = grpc.ClientDuplexStream<unknown, unknown>;

/**
 * One attempt of a server-streaming call made as kit's services serve it (STOP_ON_HALF_CLOSE_KEY): the request, then
 * this side stays open while the service says it will end the call on our half-close. `end` gives it up before its
 * end, and reads what still comes (discarding it) until the service has ended it.
 */
export class StreamCall {
  /** The service ends the call on our half-close (true), does not (false), or has not said yet (null). */
  private stoppable: boolean | null = null;
  private ended = false;
  private stopWanted = false;
  private readonly fallback: NodeJS.Timeout;
  /** Its status has come: nothing left to end. */
  finished = false;

  constructor(
    readonly call: Duplex,
    request: unknown,
    headersWaitMs = STREAM_HEADERS_WAIT_MS,
  ) {
    this.fallback = setTimeout(() => this.learn(false), headersWaitMs).unref();
    call.on('metadata', (md: grpc.Metadata) => this.learn(md.get(STOP_ON_HALF_CLOSE_KEY)[0] === '1'));
    call.on('status', () => {
      this.finished = true;
      clearTimeout(this.fallback);
    });
    // Its errors reach whoever reads it; one nobody reads must not be an unhandled 'error'.
    call.on('error', () => undefined);
    call.write(request);
  }

  /**
   * Gives the call up: `stop` asks the service to end it (a service that does not end on a half-close is cancelled),
   * otherwise (its final message read) it is left to end by itself. Either way what still comes is read, and a call
   * still open STREAM_END_WAIT_MS later is cancelled. `calls` holds it meanwhile (a client closing cancels them).
   */
  end(stop: boolean, calls: Set<Duplex>): void {
    if (this.ended || this.finished) return;
    this.ended = true;
    this.stopWanted = stop;
    const c = this.call;
    calls.add(c);
    const timer = setTimeout(() => c.cancel(), STREAM_END_WAIT_MS).unref();
    c.on('status', () => {
      clearTimeout(timer);
      calls.delete(c);
    });
    if (stop && this.stoppable !== null) this.stop();
    // Read to the end whether or not anyone still reads: messages left unread hold the call back (flow control), and
    // its status with them.
    void (async () => {
      for await (const message of c.iterator({ destroyOnReturn: false })) void message;
    })().catch(() => undefined);
  }

  private learn(stoppable: boolean): void {
    if (this.stoppable !== null) return;
    this.stoppable = stoppable;
    clearTimeout(this.fallback);
    // A service that does not know the convention waits for the half-close (grpc-js) or ignores it.
    if (!stoppable) this.halfClose();
    if (this.stopWanted) this.stop();
  }

  private stop(): void {
    if (this.finished) return;
    if (this.stoppable) this.halfClose();
    else this.call.cancel();
  }

  private halfClose(): void {
    if (!this.call.writableEnded) this.call.end();
  }
}
