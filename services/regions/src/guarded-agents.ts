/**
 * Node http(s) agents for the storage SDKs (@aws-sdk/client-s3, @azure/storage-blob) under the kit's egress guard:
 * the URL's shape and an IP-literal host are checked before any call (checkUrlShape), and a host name's resolved
 * addresses are checked when each socket is opened, so the address used is the address checked.
 */
import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import http from 'node:http';
import https from 'node:https';
import { EgressError, refusedAddress, type EgressPolicy } from '@svc/kit';

type LookupCallback = (err: NodeJS.ErrnoException | null, address?: string | LookupAddress[], family?: number) => void;

/** A `lookup` for net.connect that refuses addresses the policy does not allow. */
export function guardedLookup(policy: EgressPolicy) {
  return (hostname: string, options: { all?: boolean }, callback: LookupCallback): void => {
    dnsLookup(hostname, { all: true }, (err, addresses) => {
      if (err) return callback(new EgressError('dns', `${hostname} does not resolve`));
      for (const a of addresses) {
        const why = refusedAddress(a.address, policy);
        if (why) return callback(new EgressError('address', `${hostname} resolves to ${a.address}, which ${why}`));
      }
      if (options.all) callback(null, addresses);
      else callback(null, addresses[0].address, addresses[0].family);
    });
  };
}

export interface GuardedAgents {
  http: http.Agent;
  https: https.Agent;
  /** The agent for a URL's scheme. */
  for(url: URL): http.Agent;
  destroy(): void;
}

/** One pair per validation: no pooled socket outlives it. */
export function guardedAgents(policy: EgressPolicy): GuardedAgents {
  const lookup = guardedLookup(policy) as never;
  const agents = { http: new http.Agent({ lookup }), https: new https.Agent({ lookup }) };
  return {
    ...agents,
    for: (url) => (url.protocol === 'https:' ? agents.https : agents.http),
    destroy: () => {
      agents.http.destroy();
      agents.https.destroy();
    },
  };
}
