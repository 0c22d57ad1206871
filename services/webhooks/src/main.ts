import '@svc/kit/src/telemetry';
import { runMain } from '@svc/kit';
import { startWebhooks } from './server';

runMain('webhooks', () => startWebhooks());
