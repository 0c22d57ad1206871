import '@svc/kit/telemetry';
import { runMain } from '@svc/kit';
import { startBilling } from './server';

runMain('billing', () => startBilling());
