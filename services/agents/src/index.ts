export { startAgents } from './server';
