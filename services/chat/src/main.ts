import '@svc/kit/telemetry';
import { runMain } from '@svc/kit';
import { startChat } from './server';

runMain('chat', () => startChat());
