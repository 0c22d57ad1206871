/**
 * Start-up alongside the processes this one calls. The launcher starts the gateway at the same time as the services
 * (each spends most of its start-up loading code) with SVC_WAIT_FOR_PEERS=1, and tells it over IPC (`peers-ready`)
 * once they listen. The gateway builds everything meanwhile and makes its first calls only then: a channel that met
 * a port not yet bound would wait out gRPC's reconnect backoff (hundreds of milliseconds, growing) before trying again.
 * Anywhere else (no launcher, Kubernetes) it resolves at once.
 */
/** The message a launcher sends when the peers of a process started with SVC_WAIT_FOR_PEERS=1 are up. */
export const PEERS_READY_MESSAGE = { type: 'peers-ready' } as const;

export function peersReady(env: NodeJS.ProcessEnv, timeoutMs = 60_000): Promise<void> {
  if (env.SVC_WAIT_FOR_PEERS !== '1' || !process.send) return Promise.resolve();
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      process.off('message', onMessage);
      resolve();
    };
    const onMessage = (m: { type?: string } | null) => {
      if (m?.type === PEERS_READY_MESSAGE.type) done();
    };
    // Never stuck: without word from the launcher it goes on as it would have without waiting.
    const timer = setTimeout(done, timeoutMs);
    process.on('message', onMessage);
  });
}
