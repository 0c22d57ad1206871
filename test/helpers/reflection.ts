/**
 * A gRPC server reflection client (grpc.reflection.v1, the protocol grpcurl speaks), built from the reflection.proto
 * that @grpc/reflection ships: lists a server's services and fetches the descriptors that declare them.
 */
import { dirname, join } from 'node:path';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';

const REFLECTION_PROTO = join(dirname(require.resolve('@grpc/reflection/package.json')), 'build/proto/grpc/reflection/v1/reflection.proto');

type ReflectionStub = grpc.Client & { ServerReflectionInfo(): grpc.ClientDuplexStream<object, ReflectionResponse> };
interface ReflectionResponse {
  listServicesResponse?: { service: Array<{ name: string }> };
  fileDescriptorResponse?: { fileDescriptorProto: Buffer[] };
  errorResponse?: { errorCode: number; errorMessage: string };
}

const definition = protoLoader.loadSync(REFLECTION_PROTO, { keepCase: false, longs: String, enums: String, defaults: true, oneofs: true });
const ServerReflection = (grpc.loadPackageDefinition(definition) as any).grpc.reflection.v1.ServerReflection as new (
  address: string,
  credentials: grpc.ChannelCredentials,
) => ReflectionStub;

export class ReflectionClient {
  private readonly stub: ReflectionStub;
  constructor(readonly address: string) {
    this.stub = new ServerReflection(address, grpc.credentials.createInsecure());
  }

  /** One request on its own stream, its one answer (an error answer or a failed call rejects). */
  // Generous: the first reflection call of a server builds its descriptors (and loads @grpc/reflection) on a busy CI machine.
  private ask(request: object, timeoutMs = 20_000): Promise<ReflectionResponse> {
    return new Promise((resolve, reject) => {
      const call = this.stub.ServerReflectionInfo();
      const timer = setTimeout(() => {
        call.cancel();
        reject(new Error(`no reflection answer from ${this.address} in ${timeoutMs} ms`));
      }, timeoutMs);
      call.once('data', (res: ReflectionResponse) => {
        clearTimeout(timer);
        call.end();
        if (res.errorResponse) reject(new Error(`reflection error ${res.errorResponse.errorCode}: ${res.errorResponse.errorMessage}`));
        else resolve(res);
      });
      call.once('error', (err) => {
        clearTimeout(timer);
        reject(err);
      });
      call.write(request);
    });
  }

  /** The fully qualified names of the services the server lists. */
  async listServices(): Promise<string[]> {
    const res = await this.ask({ listServices: '*' });
    return res.listServicesResponse!.service.map((s) => s.name).sort();
  }

  /** The file descriptors (encoded FileDescriptorProto) that declare a symbol, with what they import. */
  async fileContainingSymbol(symbol: string): Promise<Buffer[]> {
    const res = await this.ask({ fileContainingSymbol: symbol });
    return res.fileDescriptorResponse!.fileDescriptorProto;
  }

  /** A service's method names (`SignIn`), read from its reflected descriptors. */
  async methodsOf(service: string): Promise<string[]> {
    const definition = (await this.definitionsOf(service))[service] as grpc.ServiceDefinition | undefined;
    if (!definition) throw new Error(`${service} is not in the reflected descriptors`);
    return Object.values(definition)
      .map((m) => m.path.split('/')[2])
      .sort();
  }

  /**
   * A client for a service built from nothing but what reflection answered (as grpcurl does): its descriptors become
   * a FileDescriptorSet, loaded with proto-loader.
   */
  async clientFor(service: string): Promise<grpc.Client & Record<string, (...args: any[]) => any>> {
    const pkg = grpc.loadPackageDefinition(await this.definitionsOf(service));
    const Ctor = service.split('.').reduce((o: any, part) => o?.[part], pkg) as grpc.ServiceClientConstructor;
    return new Ctor(this.address, grpc.credentials.createInsecure()) as never;
  }

  /** The reflected descriptors of a symbol's file (and its imports), loaded by proto-loader. */
  private async definitionsOf(symbol: string): Promise<protoLoader.PackageDefinition> {
    const files = await this.fileContainingSymbol(symbol);
    // FileDescriptorSet { repeated FileDescriptorProto file = 1; }: each file is field 1, length-delimited.
    const set = Buffer.concat(files.map((f) => Buffer.concat([Buffer.from([0x0a]), varint(f.length), f])));
    return protoLoader.loadFileDescriptorSetFromBuffer(set, { longs: String, enums: String, defaults: true, oneofs: true });
  }

  close(): void {
    this.stub.close();
  }
}

function varint(n: number): Buffer {
  const bytes: number[] = [];
  while (n > 0x7f) {
    bytes.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  bytes.push(n);
  return Buffer.from(bytes);
}
