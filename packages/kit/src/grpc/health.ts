/**
 * The standard gRPC health service (`grpc.health.v1.Health`: Check, Watch, List), as grpc-health-check serves it,
 * with its three messages encoded by hand. grpc-health-check reads its .proto with protobufjs when it loads: about
 * 90 ms of every service process's start (a tenth of it), and nothing else in a service loads protobufjs. Its .proto
 * still describes the service to reflection (reflection.ts, loaded on the first reflection call).
 *
 *   HealthCheckRequest  { string service = 1; }
 *   HealthCheckResponse { ServingStatus status = 1; }   UNKNOWN 0, SERVING 1, NOT_SERVING 2, SERVICE_UNKNOWN 3
 *   HealthListRequest   {}
 *   HealthListResponse  { map<string, HealthCheckResponse> statuses = 1; }
 */
import * as grpc from '@grpc/grpc-js';

export type ServingStatus = 'UNKNOWN' | 'SERVING' | 'NOT_SERVING' | 'SERVICE_UNKNOWN';
const STATUS_NUMBERS: Record<ServingStatus, number> = { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 };
const STATUS_NAMES = Object.keys(STATUS_NUMBERS) as ServingStatus[];

/** As grpc-health-check: List answers RESOURCE_EXHAUSTED past this many names. */
const LIST_LIMIT = 100;

// --- the wire format: varints and length-delimited fields, unknown fields skipped ---

function varint(n: number): number[] {
  const out: number[] = [];
  for (; n > 0x7f; n = Math.floor(n / 128)) out.push((n % 128) | 0x80);
  out.push(n);
  return out;
}

function lengthDelimited(field: number, bytes: Buffer): Buffer {
  return Buffer.concat([Buffer.from([(field << 3) | 2, ...varint(bytes.length)]), bytes]);
}

/** The fields of a message: number -> last value (a varint's number, or a length-delimited field's bytes). */
function fieldsOf(bytes: Buffer): Map<number, number | Buffer> {
  const fields = new Map<number, number | Buffer>();
  let at = 0;
  const readVarint = (): number => {
    let n = 0;
    for (let shift = 1; ; shift *= 128) {
      if (at >= bytes.length) throw new Error('truncated varint');
      const b = bytes[at++];
      n += (b & 0x7f) * shift;
      if (b < 0x80) return n;
      if (shift > 2 ** 49) throw new Error('varint too long');
    }
  };
  while (at < bytes.length) {
    const key = readVarint();
    const [field, type] = [Math.floor(key / 8), key % 8];
    if (type === 0) fields.set(field, readVarint());
    else if (type === 2) {
      const length = readVarint();
      if (at + length > bytes.length) throw new Error('truncated field');
      fields.set(field, bytes.subarray(at, at + length));
      at += length;
    } else if (type === 1) at += 8;
    else if (type === 5) at += 4;
    else throw new Error(`unsupported wire type ${type}`);
  }
  return fields;
}

/** A HealthCheckRequest: the service name asked about ('' is the whole server). */
export function decodeCheckRequest(bytes: Buffer): { service: string } {
  const service = fieldsOf(bytes).get(1);
  return { service: Buffer.isBuffer(service) ? service.toString('utf8') : '' };
}

export function encodeCheckRequest({ service }: { service: string }): Buffer {
  return service ? lengthDelimited(1, Buffer.from(service, 'utf8')) : Buffer.alloc(0);
}

export function encodeCheckResponse({ status }: { status: ServingStatus }): Buffer {
  const n = STATUS_NUMBERS[status];
  return n ? Buffer.from([0x08, n]) : Buffer.alloc(0);
}

export function decodeCheckResponse(bytes: Buffer): { status: ServingStatus } {
  const n = fieldsOf(bytes).get(1);
  return { status: (typeof n === 'number' && STATUS_NAMES[n]) || 'UNKNOWN' };
}

export function encodeListResponse({ statuses }: { statuses: Record<string, { status: ServingStatus }> }): Buffer {
  return Buffer.concat(
    Object.entries(statuses).map(([name, { status }]) =>
      lengthDelimited(
        1,
        Buffer.concat([lengthDelimited(1, Buffer.from(name, 'utf8')), lengthDelimited(2, encodeCheckResponse({ status }))]),
      ),
    ),
  );
}

const NOTHING = (): Buffer => Buffer.alloc(0);
const method = <Req, Res>(
  name: string,
  responseStream: boolean,
  request: [(v: Req) => Buffer, (b: Buffer) => Req],
  response: [(v: Res) => Buffer, (b: Buffer) => Res],
) => ({
  path: `/grpc.health.v1.Health/${name}`,
  requestStream: false,
  responseStream,
  requestSerialize: request[0],
  requestDeserialize: request[1],
  responseSerialize: response[0],
  responseDeserialize: response[1],
  originalName: name.toLowerCase(),
});

/** The service's definition, as grpc-js serves it. */
export const HEALTH_DEFINITION: grpc.ServiceDefinition = {
  check: method('Check', false, [encodeCheckRequest, decodeCheckRequest], [encodeCheckResponse, decodeCheckResponse]),
  watch: method('Watch', true, [encodeCheckRequest, decodeCheckRequest], [encodeCheckResponse, decodeCheckResponse]),
  list: method('List', false, [NOTHING, () => ({})], [encodeListResponse, () => ({ statuses: {} })]),
};

/** Each name's status, and the Watch calls following them. */
export class HealthStatuses {
  private readonly statuses = new Map<string, ServingStatus>();
  private readonly watchers = new Map<string, Set<(status: ServingStatus) => void>>();

  constructor(initial: Record<string, ServingStatus>) {
    for (const [name, status] of Object.entries(initial)) this.statuses.set(name, status);
  }

  setStatus(name: string, status: ServingStatus): void {
    this.statuses.set(name, status);
    for (const watcher of this.watchers.get(name) ?? []) watcher(status);
  }

  /** The handlers of HEALTH_DEFINITION. Check answers NOT_FOUND for a name it does not know, as the protocol says. */
  handlers(): grpc.UntypedServiceImplementation {
    const check: grpc.handleUnaryCall<{ service: string }, { status: ServingStatus }> = (call, callback) => {
      const status = this.statuses.get(call.request.service);
      if (status) callback(null, { status });
      else callback({ code: grpc.status.NOT_FOUND, details: `Health status unknown for service ${call.request.service}` });
    };
    const watch: grpc.handleServerStreamingCall<{ service: string }, { status: ServingStatus }> = (call) => {
      const name = call.request.service;
      const send = (status: ServingStatus) => call.write({ status });
      let set = this.watchers.get(name);
      if (!set) this.watchers.set(name, (set = new Set()));
      set.add(send);
      call.on('cancelled', () => {
        set.delete(send);
        if (set.size === 0 && this.watchers.get(name) === set) this.watchers.delete(name);
      });
      send(this.statuses.get(name) ?? 'SERVICE_UNKNOWN');
    };
    const list: grpc.handleUnaryCall<unknown, { statuses: Record<string, { status: ServingStatus }> }> = (_call, callback) => {
      if (this.statuses.size > LIST_LIMIT) return callback({ code: grpc.status.RESOURCE_EXHAUSTED, details: 'Too many services to list.' });
      callback(null, { statuses: Object.fromEntries([...this.statuses].map(([name, status]) => [name, { status }])) });
    };
    return { check, watch, list } as grpc.UntypedServiceImplementation;
  }
}
