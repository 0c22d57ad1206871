// The accounts pages' way to the API: @svc/sdk/browser, same-origin with the session cookie. (The console's other
// pages reach it through their own adapter; these use the SDK directly so they need nothing else.)
import { SvcClient } from '@svc/sdk/browser';

// The SDK calls its fetch as a method of itself: the browser's must stay bound to window.
export const accounts = new SvcClient({ baseUrl: location.origin, maxRetries: 1, fetch: (input, init) => fetch(input, init) });

/** The one-time token a link carries as its last path segment (/invitations/:token, /reset-password/:token, ...). */
export const linkToken = (): string => decodeURIComponent(location.pathname.split('/').pop() ?? '');
