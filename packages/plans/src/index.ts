export * from './entitlements';
