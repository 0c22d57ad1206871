import '@svc/kit/telemetry';
import { runMain } from '@svc/kit';
import { startIdentity } from './server';

runMain('identity', () => startIdentity());
