/**
 * The OpenAI-compatible API under /v1 (CONTRACT.md 9): a tenant points an OpenAI client at the platform with one of
 * its API keys. The chat service makes the calls (as chat replies: reservations, billing, leases, per-key limits);
 * these routes translate the wire formats (lib/openai-format.ts). One file per endpoint family, registered here.
 */
import type { FastifyInstance } from 'fastify';
import type { GatewayDeps } from '../../deps';
import { callRelay } from './call-relay';
import { chatCompletionsRoute } from './chat-completions';
import { embeddingsRoute } from './embeddings';
import { modelsRoute } from './models';
import { responsesRoutes } from './responses';

export function openAiRoutes(app: FastifyInstance, deps: GatewayDeps): void {
  const relay = callRelay(app, deps);
  modelsRoute(app, deps);
  chatCompletionsRoute(app, deps, relay);
  responsesRoutes(app, deps, relay);
  embeddingsRoute(app, deps);
  // Another endpoint family: its own file here, registered with one line.
}
