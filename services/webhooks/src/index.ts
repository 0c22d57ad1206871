export { startWebhooks, type WebhooksOptions } from './server';
