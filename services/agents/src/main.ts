import '@svc/kit/telemetry';
import { runMain } from '@svc/kit';
import { startAgents } from './server';

runMain('agents', () => startAgents());
