import '@svc/kit/telemetry';
import { runMain } from '@svc/kit';
import { startProjects } from './server';

runMain('projects', () => startProjects());
