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
import type * as protoLoader from '@grpc/proto-loader';
import type { ReflectionService } from '@grpc/reflection';
import { FILE_DESCRIPTOR_SET } from '@svc/proto';

/** The health service every server has (health.ts; its .proto is grpc-health-check's). */
export const HEALTH_SERVICE = 'grpc.health.v1.Health';

/* eslint-disable @typescript-eslint/no-require-imports -- deliberate lazy loads (see reflectionDefinitions) */
let definitions: protoLoader.PackageDefinition | null = null;

/**
 * The files of every message and service of /proto and of the health protocol, as proto-loader describes them (read
 * once), one entry per set of files. @grpc/reflection reads only the entries' file descriptors, decoding those of
 * every entry before it keeps the first file of each name: proto-loader gives each of its ~350 entries the whole set
 * of files, which made ~3,000 decodes (about a second) for each server's first reflection call.
 */
function packageDefinition(): protoLoader.PackageDefinition {
  if (definitions) return definitions;
  const loader = require('@grpc/proto-loader') as typeof import('@grpc/proto-loader');
  const { protoPath: healthProtoPath } = require('grpc-health-check') as typeof import('grpc-health-check');
  const all = {
    ...loader.loadFileDescriptorSetFromBuffer(Buffer.from(FILE_DESCRIPTOR_SET, 'base64')),
    ...loader.loadSync(healthProtoPath),
  };
  const seen = new Set<unknown>();
  definitions = {};
  for (const [name, definition] of Object.entries(all)) {
    const files = (definition as { fileDescriptorProtos?: unknown }).fileDescriptorProtos;
    if (!Array.isArray(files) || seen.has(files)) continue;
    seen.add(files);
    definitions[name] = definition;
  }
  return definitions;
}

/** @grpc/reflection itself: it reads its own .proto files with proto-loader when it loads (~120 ms). */
function reflectionService(): typeof ReflectionService {
  return (require('@grpc/reflection') as typeof import('@grpc/reflection')).ReflectionService;
}
/* eslint-enable @typescript-eslint/no-require-imports */

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

/** The services @grpc/reflection serves, in the order it adds them (v1, then v1alpha), each with one bidi method. */
export const REFLECTION_SERVICES = ['grpc.reflection.v1.ServerReflection', 'grpc.reflection.v1alpha.ServerReflection'];

let packaged: grpc.ServiceDefinition[] | undefined;

/** The reflection services' definitions as @grpc/reflection builds them (an empty package costs nothing more). */
export function reflectionDefinitions(): grpc.ServiceDefinition[] {
  return (packaged ??= handlersOf(new (reflectionService())({}, { services: [] })).map(({ definition }) => definition));
}

/**
 * The definitions grpc-js registers at start-up without loading @grpc/reflection: each method's path and kind are
 * fixed by the protocol, and its (de)serialisers are the package's, looked up when the first message passes.
 */
export function lazyReflectionDefinitions(): grpc.ServiceDefinition[] {
  return REFLECTION_SERVICES.map((service, i) => {
    const method = () => reflectionDefinitions()[i].ServerReflectionInfo;
    return {
      ServerReflectionInfo: {
        path: `/${service}/ServerReflectionInfo`,
        requestStream: true,
        responseStream: true,
        originalName: 'serverReflectionInfo',
        requestSerialize: (value: unknown) => method().requestSerialize(value),
        requestDeserialize: (bytes: Buffer) => method().requestDeserialize(bytes),
        responseSerialize: (value: unknown) => method().responseSerialize(value),
        responseDeserialize: (bytes: Buffer) => method().responseDeserialize(bytes),
      },
    };
  });
}

/**
 * Adds the reflection service to a server, listing `services` (fully qualified names, e.g. `chat.v1.ChatService`).
 * Indexing the descriptors costs some 50 ms per server, and loading @grpc/reflection another ~120 ms per process, so
 * both wait for the first reflection call: start-up (and every test stack) does not pay for what only an operator's
 * tool asks for.
 */
export function addReflection(server: Pick<grpc.Server, 'addService'>, services: string[]): void {
  let real: ReturnType<typeof handlersOf> | undefined;
  lazyReflectionDefinitions().forEach((definition, i) =>
    server.addService(definition, {
      ServerReflectionInfo: (stream: grpc.ServerDuplexStream<unknown, unknown>) => {
        real ??= handlersOf(new (reflectionService())(packageDefinition(), { services }));
        real[i].handler(stream);
      },
    }),
  );
}
