import type { Socket } from 'node:net';
import type { FastifyInstance } from 'fastify';

/**
 * Connections that never sent a byte are closed when the gateway closes. Node's `server.close()` closes idle
 * keep-alive connections but not one still waiting for its first request (an HTTP client's spare connection, a
 * probe), and then waits for it: a gateway's stop, and a pod's termination, hung on it until the client went away.
 */
export function closeSilentConnections(app: FastifyInstance): void {
  // Every open connection (no 'data' listener: the HTTP parser reads the socket's handle itself).
  const open = new Set<Socket>();
  app.server.on('connection', (socket: Socket) => {
    open.add(socket);
    socket.once('close', () => open.delete(socket));
  });
  app.addHook('preClose', (done) => {
    for (const socket of open) if (socket.bytesRead === 0) socket.destroy();
    done();
  });
}
