export { startIdentity, REVOCATION_CHANNEL } from './server';
