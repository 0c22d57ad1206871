#!/usr/bin/env node
// Container health check for a gRPC service: asks grpc.health.v1.Health/Check on 127.0.0.1:<port> and exits 0
// only for SERVING. The kit's server registers the health service and turns the whole server ('') NOT_SERVING
// while the store is unreachable and while it stops, so this sees what Kubernetes' native gRPC probe sees.
//   node deploy/grpc-health.mjs <port> [service-name]        (plain JavaScript: no tsx, starts in ~100 ms)
import grpc from '@grpc/grpc-js';
import healthCheck from 'grpc-health-check';

const [port, name = ''] = process.argv.slice(2);
if (!/^\d+$/.test(port ?? '')) {
  console.error('usage: grpc-health.mjs <port> [service-name]');
  process.exit(2);
}
const Health = grpc.makeClientConstructor(healthCheck.service, 'grpc.health.v1.Health');
const client = new Health(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
client.check({ service: name }, { deadline: Date.now() + 2000 }, (err, res) => {
  const status = err ? `error: ${err.details || err.message}` : res.status;
  if (status !== 'SERVING') console.error(`grpc health ${port} '${name}': ${status}`);
  client.close();
  process.exit(status === 'SERVING' ? 0 : 1);
});
