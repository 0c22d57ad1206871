import { errors, identityVerifier, openRuntime, registration, serve, type RunningService } from '@svc/kit';
import { agentsV1 } from '@svc/proto';
import { agentHandlers } from './agent-handlers';
import { agents } from './collections';

export async function startAgents(env: NodeJS.ProcessEnv = process.env): Promise<RunningService> {
  const rt = await openRuntime({ name: 'agents', defaultPort: 50053, collections: [agents], env });
  const { verifier, identity } = identityVerifier(rt.config);
  const notYet = async (): Promise<never> => {
    throw errors.unavailable('runs are not available yet');
  };
  return serve(rt, {
    verifier,
    healthNames: ['agents.v1.AgentsService'],
    registrations: [
      registration({
        definition: agentsV1.AgentsServiceService,
        implementation: {
          ...agentHandlers(rt.store, async () => {}),
          executeAgent: notYet,
          listRuns: notYet,
          getRun: notYet,
          cancelRun: notYet,
          approveRun: notYet,
          rejectRun: notYet,
        },
      }),
    ],
    onStop: async () => identity.close(),
  });
}
