export { startGateway, type RunningGateway } from './server';
export { buildApp } from './app';
