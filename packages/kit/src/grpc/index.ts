export * from './types';
export * from './server';
export * from './client';
export * from './authed';
export * from './reflection';
