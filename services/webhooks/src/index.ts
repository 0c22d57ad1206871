export { startWebhooks } from './server';
