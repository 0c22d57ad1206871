import '@svc/kit/src/telemetry';
import { runMain } from '@svc/kit';
import { startRegions } from './server';

runMain('regions', () => startRegions());
