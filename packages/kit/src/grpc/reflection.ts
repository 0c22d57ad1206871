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

/** Adds the reflection service to a server, listing `services` (fully qualified names, e.g. `chat.v1.ChatService`). */
export function addReflection(server: Pick<grpc.Server, 'addService'>, services: string[]): void {
  new ReflectionService(packageDefinition(), { services }).addToServer(server);
}
