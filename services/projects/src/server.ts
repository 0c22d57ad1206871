import { capCounters, FeedNotifier, openRuntime, registration, serve, type RunningService } from '@svc/kit';
import { identityVerifier } from '@svc/contracts';
import { projectsV1 } from '@svc/proto';
import { projectChanges, projects } from './collections';
import { projectsConfig } from './config';
import { projectHandlers } from './handlers';

export async function startProjects(env: NodeJS.ProcessEnv = process.env): Promise<RunningService> {
  const rt = await openRuntime({
    name: 'projects',
    defaultPort: 50052,
    config: projectsConfig,
    collections: [projects, projectChanges, capCounters],
    env,
  });
  const { verifier, identity } = identityVerifier(rt.config);
  const feed = await FeedNotifier.open(rt.store, projectChanges, {
    pollMs: rt.config.feedPollMs,
    logger: rt.logger,
    // The gateways' project cache keeps entries a minute: ten minutes of changes is plenty for a starting reader.
    retainMs: 10 * 60_000,
    wake: rt.wake,
  });
  return serve(rt, {
    verifier,
    healthNames: ['projects.v1.ProjectsService'],
    registrations: [
      registration({
        definition: projectsV1.ProjectsServiceService,
        implementation: projectHandlers(rt.store, rt.relay, feed, rt.config.maxProjectsPerTenant),
        publicMethods: ['listProjectChanges', 'watchProjectChanges'],
      }),
    ],
    beforeStop: () => feed.stop(),
    onStop: async () => identity.close(),
  });
}
