export { startChat, type ChatOptions } from './server';
export type { CreditCheck } from './credits';
