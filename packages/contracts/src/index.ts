export * from './topics';
export * from './domain-events';
export * from './identity';
export * from './credits';
export * from './plan-order';
export * from './pricing-config';
export * from './model-call';
export * from './accounts-config';
