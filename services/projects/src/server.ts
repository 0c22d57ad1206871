import { field, identityVerifier, openRuntime, registration, serve, type RunningService } from '@svc/kit';
import { projectsV1 } from '@svc/proto';
import { projects } from './collections';
import { projectHandlers } from './handlers';

const config = {
  maxProjectsPerTenant: field('PROJECTS_PER_TENANT', 'int', { default: '1000', min: 1, max: 1_000_000 }),
};

export async function startProjects(env: NodeJS.ProcessEnv = process.env): Promise<RunningService> {
  const rt = await openRuntime({ name: 'projects', defaultPort: 50052, config, collections: [projects], env });
  const { verifier, identity } = identityVerifier(rt.config);
  return serve(rt, {
    verifier,
    healthNames: ['projects.v1.ProjectsService'],
    registrations: [
      registration({
        definition: projectsV1.ProjectsServiceService,
        implementation: projectHandlers(rt.store, rt.relay, rt.config.maxProjectsPerTenant),
      }),
    ],
    onStop: async () => identity.close(),
  });
}
