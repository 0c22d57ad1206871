/**
 * The reflection definitions a server registers at start-up, written without @grpc/reflection (loaded at the first
 * reflection call), are the package's own: the same methods, paths and kinds, and (de)serialisers that are the
 * package's once a message passes. test/e2e/grpc-reflection.test.ts calls reflection on every service.
 */
import { lazyReflectionDefinitions, reflectionDefinitions, REFLECTION_SERVICES } from './reflection';

type Method = {
  path: string;
  requestStream: boolean;
  responseStream: boolean;
  originalName?: string;
  requestSerialize: (v: unknown) => Buffer;
  requestDeserialize: (b: Buffer) => unknown;
  responseSerialize: (v: unknown) => Buffer;
  responseDeserialize: (b: Buffer) => unknown;
};
const shape = (defs: object[]) =>
  defs.map((d) =>
    Object.fromEntries(
      Object.entries(d as Record<string, Method>).map(([name, m]) => [
        name,
        { path: m.path, requestStream: m.requestStream, responseStream: m.responseStream, originalName: m.originalName },
      ]),
    ),
  );

it('registers the methods @grpc/reflection serves, in its order', () => {
  const lazy = lazyReflectionDefinitions();
  const real = reflectionDefinitions();
  expect(shape(lazy)).toEqual(shape(real));
  expect(shape(lazy).map((d) => d.ServerReflectionInfo.path)).toEqual(REFLECTION_SERVICES.map((s) => `/${s}/ServerReflectionInfo`));
});

it("encodes and decodes messages with the package's serialisers", () => {
  const lazy = lazyReflectionDefinitions();
  const real = reflectionDefinitions();
  lazy.forEach((d, i) => {
    const l = d.ServerReflectionInfo as unknown as Method;
    const r = real[i].ServerReflectionInfo as unknown as Method;
    const request = { host: 'h', listServices: '*' };
    expect(l.requestSerialize(request)).toEqual(r.requestSerialize(request));
    expect(l.requestDeserialize(r.requestSerialize(request))).toEqual(r.requestDeserialize(r.requestSerialize(request)));
    const response = { validHost: 'h', listServicesResponse: { service: [{ name: 'chat.v1.ChatService' }] } };
    const bytes = r.responseSerialize(response);
    expect(bytes.length).toBeGreaterThan(10);
    expect(l.responseSerialize(response)).toEqual(bytes);
    expect(l.responseDeserialize(bytes)).toEqual(r.responseDeserialize(bytes));
  });
});
