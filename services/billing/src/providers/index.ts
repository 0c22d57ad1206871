import { errors } from '@svc/kit';
import type { PaymentProvider } from './port';
import { sandboxProvider } from './sandbox';
import { stripeProvider } from './stripe';

export type { Checkout, CheckoutRequest, PaymentProvider, ProviderEvent } from './port';

export interface ProviderSettings {
  stripeSecretKey?: string;
  stripeWebhookSecret?: string;
  stripeApiUrl?: string;
  publicUrl: string;
}

/** Stripe when it is configured (both keys), else the sandbox (CONTRACT.md 5). */
export function paymentProvider(s: ProviderSettings): PaymentProvider {
  if (!s.stripeSecretKey) return sandboxProvider(s.publicUrl);
  if (!s.stripeWebhookSecret) throw new Error('STRIPE_WEBHOOK_SECRET must be set with STRIPE_SECRET_KEY (webhooks settle payments)');
  return stripeProvider({
    secretKey: s.stripeSecretKey,
    webhookSecret: s.stripeWebhookSecret,
    apiUrl: s.stripeApiUrl,
    publicUrl: s.publicUrl,
  });
}

/** The provider a webhook names must be the one configured. */
export function providerNamed(provider: PaymentProvider, name: string): PaymentProvider {
  if (name !== provider.name || provider.settlesAtOnce) throw errors.notFound('payment_provider', name.slice(0, 40));
  return provider;
}
