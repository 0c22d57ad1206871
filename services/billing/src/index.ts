export { startBilling } from './server';
