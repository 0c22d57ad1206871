import { identityVerifier, openRuntime, registration, serve, type RunningService } from '@svc/kit';
import { projectsV1 } from '@svc/proto';
import { projects } from './collections';
import { projectHandlers } from './handlers';

export async function startProjects(env: NodeJS.ProcessEnv = process.env): Promise<RunningService> {
  const rt = await openRuntime({ name: 'projects', defaultPort: 50052, collections: [projects], env });
  const { verifier, identity } = identityVerifier(rt.config);
  return serve(rt, {
    verifier,
    healthNames: ['projects.v1.ProjectsService'],
    registrations: [registration({ definition: projectsV1.ProjectsServiceService, implementation: projectHandlers(rt.store, rt.relay) })],
    onStop: async () => identity.close(),
  });
}
