import '@svc/kit/telemetry';
import { runMain } from '@svc/kit';
import { startGateway } from './server';

runMain('gateway', () => startGateway());
