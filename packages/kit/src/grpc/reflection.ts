/**
 * gRPC server reflection (grpc.reflection.v1 and v1alpha, by @grpc/reflection) on every service's server, so that
 * operators can list and call the services with standard tools (grpcurl, grpcui, Postman) without the .proto files.
 *
 * It answers from the descriptors of every /proto file, compiled into @svc/proto by `npm run proto` (so the bundles
 * read no .proto file at run time), plus the health service's. Each server lists only what it serves. Reflection is
 * on the service ports only, which only the mesh reaches: the public gateway speaks HTTP and proxies no gRPC
 * (docs/runbooks/grpc.md).
 */
import type * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import { ReflectionService } from '@grpc/reflection';
import { protoPath as healthProtoPath } from 'grpc-health-check';
import { FILE_DESCRIPTOR_SET } from '@svc/proto';

/** The health service every server has (grpc-health-check). */
export const HEALTH_SERVICE = 'grpc.health.v1.Health';

let definitions: protoLoader.PackageDefinition | null = null;

/** Every message and service of /proto and of the health protocol, as proto-loader describes them (read once). */
function packageDefinition(): protoLoader.PackageDefinition {
  return (definitions ??= {
    ...protoLoader.loadFileDescriptorSetFromBuffer(Buffer.from(FILE_DESCRIPTOR_SET, 'base64')),
    ...protoLoader.loadSync(healthProtoPath),
  });
}

type Handler = (stream: grpc.ServerDuplexStream<unknown, unknown>) => void;

/** The reflection services' definitions and handlers, as a ReflectionService would add them to a server. */
function handlersOf(reflection: ReflectionService): Array<{ definition: grpc.ServiceDefinition; handler: Handler }> {
  const out: Array<{ definition: grpc.ServiceDefinition; handler: Handler }> = [];
  reflection.addToServer({
    addService: (definition: grpc.ServiceDefinition, implementation: grpc.UntypedServiceImplementation) =>
      void out.push({ definition, handler: implementation.ServerReflectionInfo as Handler }),
  });
  return out;
}

/**
 * Adds the reflection service to a server, listing `services` (fully qualified names, e.g. `chat.v1.ChatService`).
 * Indexing every descriptor costs about a second per server, so it waits for the first reflection call: start-up
 * (and every test stack) does not pay for what only an operator's tool asks for.
 */
export function addReflection(server: Pick<grpc.Server, 'addService'>, services: string[]): void {
  let real: ReturnType<typeof handlersOf> | undefined;
  // An empty package gives the same service definitions (v1 and v1alpha) at no cost; the handlers are the real ones.
  handlersOf(new ReflectionService({}, { services })).forEach(({ definition }, i) =>
    server.addService(definition, {
      ServerReflectionInfo: (stream: grpc.ServerDuplexStream<unknown, unknown>) => {
        real ??= handlersOf(new ReflectionService(packageDefinition(), { services }));
        real[i].handler(stream);
      },
    }),
  );
}
