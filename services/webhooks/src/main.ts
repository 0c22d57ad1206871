import '@svc/kit/telemetry';
import { runMain } from '@svc/kit';
import { startWebhooks } from './server';

runMain('webhooks', () => startWebhooks());
