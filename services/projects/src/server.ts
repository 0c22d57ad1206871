import { capCounters, FeedNotifier, field, openRuntime, registration, serve, type RunningService } from '@svc/kit';
import { identityVerifier } from '@svc/contracts';
import { projectsV1 } from '@svc/proto';
import { projectChanges, projects } from './collections';
import { projectHandlers } from './handlers';

const config = {
  maxProjectsPerTenant: field('PROJECTS_PER_TENANT', 'int', { default: '1000', min: 1, max: 1_000_000 }),
  feedPollMs: field('FEED_POLL_MS', 'int', { default: '500', min: 50, max: 1000 }),
};

export async function startProjects(env: NodeJS.ProcessEnv = process.env): Promise<RunningService> {
  const rt = await openRuntime({ name: 'projects', defaultPort: 50052, config, collections: [projects, projectChanges, capCounters], env });
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
