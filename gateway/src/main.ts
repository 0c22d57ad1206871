import '@svc/kit/src/telemetry';
import { ConfigError } from '@svc/kit';
import { startGateway } from './server';

startGateway().then(
  (gw) => {
    process.send?.({ type: 'ready', name: 'gateway', port: gw.port });
    let stopping = false;
    const shutdown = () => {
      if (stopping) return;
      stopping = true;
      gw.stop().then(
        () => process.exit(0),
        () => process.exit(1),
      );
    };
    process.on('SIGTERM', shutdown);
    process.on('SIGINT', shutdown);
    if (process.send) process.on('disconnect', shutdown);
  },
  (err: unknown) => {
    console.error(err instanceof ConfigError ? `gateway: ${err.message}` : err);
    process.exit(1);
  },
);
