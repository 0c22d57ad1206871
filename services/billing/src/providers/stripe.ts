import type Stripe from 'stripe';
import { errors } from '@svc/kit';
import type { Checkout, CheckoutRequest, PaymentProvider, ProviderEvent } from './port';

export interface StripeSettings {
  secretKey: string;
  webhookSecret: string;
  /** Where Stripe's API is (default api.stripe.com): a proxy, or a local server speaking its protocol in tests. */
  apiUrl?: string;
  publicUrl: string;
}

/**
 * Stripe through its official package: Checkout sessions, the billing portal, webhook signatures. The package (~100
 * ms to load) is required here, when Stripe is configured: the sandbox default never loads it.
 */
export function stripeProvider(s: StripeSettings): PaymentProvider {
  // eslint-disable-next-line @typescript-eslint/no-require-imports -- deliberate lazy load
  const StripeClient = require('stripe') as typeof import('stripe');
  const api = s.apiUrl ? new URL(s.apiUrl) : null;
  const stripe = new StripeClient(s.secretKey, {
    maxNetworkRetries: 2,
    timeout: 10_000,
    ...(api ? { host: api.hostname, port: api.port || undefined, protocol: api.protocol === 'http:' ? 'http' : 'https' } : {}),
  });
  const pages = `${s.publicUrl.replace(/\/$/, '')}/settings/billing`;

  /** Stripe failures become 503s naming the provider (never a 500, never Stripe's message with its request ids). */
  async function upstream<T>(what: string, fn: () => Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      const status = err instanceof StripeClient.errors.StripeError ? err.statusCode : undefined;
      throw errors.unavailable(`The payment provider failed to ${what}; try again`, {
        provider: 'stripe',
        ...(status ? { providerStatus: status } : {}),
      });
    }
  }

  async function customerOf(tenantId: string, customerId: string | null, invoiceId: string): Promise<string> {
    if (customerId) return customerId;
    const customer = await upstream('create the customer', () =>
      stripe.customers.create({ metadata: { tenantId } }, { idempotencyKey: `customer-${invoiceId}` }),
    );
    return customer.id;
  }

  return {
    name: 'stripe',
    settlesAtOnce: false,

    async checkout(req: CheckoutRequest): Promise<Checkout> {
      const customer = await customerOf(req.tenantId, req.customerId, req.invoiceId);
      const metadata = { tenantId: req.tenantId, invoiceId: req.invoiceId };
      const session = await upstream('start the checkout', () =>
        stripe.checkout.sessions.create(
          {
            mode: req.kind === 'subscription' ? 'subscription' : 'payment',
            customer,
            client_reference_id: req.invoiceId,
            metadata,
            line_items: [
              {
                quantity: 1,
                price_data: {
                  currency: req.currency,
                  unit_amount: req.amountCents,
                  product_data: { name: req.description },
                  ...(req.kind === 'subscription' ? { recurring: { interval: 'month' as const } } : {}),
                },
              },
            ],
            success_url: `${pages}?checkout=success`,
            cancel_url: `${pages}?checkout=cancelled`,
          },
          // A retry of the same invoice never opens a second checkout.
          { idempotencyKey: `checkout-${req.invoiceId}` },
        ),
      );
      if (!session.url) throw errors.unavailable('The payment provider returned no checkout address', { provider: 'stripe' });
      return { ref: session.id, url: session.url, customerId: customer };
    },

    async portal(tenantId: string, customerId: string | null) {
      const customer = await customerOf(tenantId, customerId, `portal-${tenantId}`);
      const session = await upstream('open the billing portal', () =>
        stripe.billingPortal.sessions.create({ customer, return_url: pages }),
      );
      return { url: session.url, customerId: customer };
    },

    parseWebhook(payload: Buffer, signature: string): ProviderEvent {
      let event: Stripe.Event;
      try {
        event = stripe.webhooks.constructEvent(payload, signature, s.webhookSecret);
      } catch {
        throw errors.badRequest('invalid_signature', 'The Stripe-Signature header does not verify');
      }
      if (event.type === 'checkout.session.completed' || event.type === 'checkout.session.async_payment_succeeded') {
        const session = event.data.object;
        // A completed session whose payment is still processing settles on async_payment_succeeded.
        if (event.type === 'checkout.session.completed' && session.payment_status === 'unpaid')
          return { type: 'ignored', eventType: event.type };
        const invoiceId = session.metadata?.invoiceId ?? session.client_reference_id ?? '';
        const customer = typeof session.customer === 'string' ? session.customer : (session.customer?.id ?? null);
        return { type: 'checkout_completed', invoiceId, ref: session.id, customerId: customer };
      }
      if (event.type === 'checkout.session.expired' || event.type === 'checkout.session.async_payment_failed') {
        const session = event.data.object;
        return { type: 'checkout_expired', invoiceId: session.metadata?.invoiceId ?? session.client_reference_id ?? '', ref: session.id };
      }
      return { type: 'ignored', eventType: event.type };
    },
  };
}
