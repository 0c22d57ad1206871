/**
 * Node http(s) agents for the storage SDKs (@aws-sdk/client-s3, @azure/storage-blob) under the kit's egress guard:
 * the URL's shape and an IP-literal host are checked before any call (checkUrlShape), and a host name's resolved
 * addresses are checked when each socket is opened, so the address used is the address checked.
 */
import http from 'node:http';
import https from 'node:https';
import { guardedLookup, type EgressPolicy } from '@svc/kit';

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
