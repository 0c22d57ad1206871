export { startProjects } from './server';
