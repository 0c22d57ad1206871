import '@svc/kit/telemetry';
import { runMain } from '@svc/kit';
import { startRegions } from './server';

runMain('regions', () => startRegions());
