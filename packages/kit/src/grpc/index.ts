export * from './types';
export * from './server';
export * from './client';
export * from './reflection';
export { STREAM_END_WAIT_MS, STREAM_HEADERS_WAIT_MS } from './stream-call';
