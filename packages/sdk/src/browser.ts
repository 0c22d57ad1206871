/**
 * The SDK's browser entry (`@svc/sdk/browser`, and the `browser` condition of `@svc/sdk`): the same client, built for
 * browsers. Nothing in the SDK imports a Node module: it uses `fetch`, web streams, `TextDecoder`, `AbortSignal` and
 * `crypto.randomUUID`, which browsers, workers, Deno, Bun and Node 20 all have (ESLint forbids Node built-ins in
 * packages/sdk/src, and the release build compiles this entry for platform=browser, which fails on any).
 */
export * from './index';
