import { field } from '@svc/kit';

/** Settings of the projects service beyond the common ones. */
export const projectsConfig = {
  maxProjectsPerTenant: field('PROJECTS_PER_TENANT', 'int', { default: '1000', min: 1, max: 1_000_000 }),
  feedPollMs: field('FEED_POLL_MS', 'int', { default: '500', min: 50, max: 1000 }),
};
