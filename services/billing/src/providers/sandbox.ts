import { errors } from '@svc/kit';
import type { PaymentProvider } from './port';

/** The default provider: every payment succeeds in the call, there is no checkout and no webhook. */
export function sandboxProvider(publicUrl: string): PaymentProvider {
  return {
    name: 'sandbox',
    settlesAtOnce: true,
    checkout() {
      throw new Error('the sandbox settles at once: billing never asks it for a checkout');
    },
    // Our own page (/settings/billing) is the sandbox's portal.
    portal: async () => ({ url: `${publicUrl.replace(/\/$/, '')}/settings/billing`, customerId: null }),
    parseWebhook() {
      throw errors.notFound('payment_provider', 'sandbox');
    },
  };
}
