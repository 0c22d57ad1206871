/** GET /v1/models: the tenant's models, and its agents as `agent:<id>`. */
import { Type } from '@sinclair/typebox';
import type { FastifyInstance } from 'fastify';
import { isAppError } from '@svc/kit';
import type { GatewayDeps } from '../../deps';
import { route } from '../../lib/route';
import { Obj } from '../../schemas';

export function modelsRoute(app: FastifyInstance, deps: GatewayDeps): void {
  const { chat, agents } = deps.clients;

  route(app, {
    method: 'GET',
    url: '/v1/models',
    operationId: 'openaiListModels',
    access: 'llm:use',
    tag: 'openai',
    summary: "OpenAI-compatible: the tenant's configured model(s), and each agent as agent:<agentId> (listed when the key may read agents)",
    envelope: false,
    response: Obj({
      object: Type.Literal('list'),
      data: Type.Array(Obj({ id: Type.String(), object: Type.Literal('model'), created: Type.Integer(), owned_by: Type.String() })),
    }),
    handler: async ({ call }) => {
      const models = await chat.listModels({}, call);
      const data = models.models.map((id) => ({ id, object: 'model' as const, created: 0, owned_by: 'tenant' }));
      // Agents, when the key may read them (a key scoped to llm:use only sees the models).
      let cursor = '';
      for (let page = 0; page < 10; page++) {
        const res = await agents.listAgents({ limit: 100, cursor }, call).catch((err: unknown) => {
          if (isAppError(err) && err.code === 'FORBIDDEN') return null;
          throw err;
        });
        if (!res) break;
        for (const a of res.agents)
          data.push({ id: `agent:${a.id}`, object: 'model', created: Math.floor(Date.parse(a.createdAt) / 1000), owned_by: 'agent' });
        if (!res.nextCursor) break;
        cursor = res.nextCursor;
      }
      return { object: 'list', data };
    },
  });
}
