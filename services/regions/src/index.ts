export { startRegions } from './server';
