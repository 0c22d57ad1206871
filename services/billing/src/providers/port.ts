/**
 * The payment provider port. `sandbox` settles at once and says so; `stripe` answers with a checkout address and
 * settles later, when its signed webhook arrives. Billing keeps the invoice and the ledger; a provider only takes
 * the payment.
 */
export interface CheckoutRequest {
  tenantId: string;
  /** Our invoice id: the provider echoes it back in its webhook (metadata), and it keys the provider's idempotency. */
  invoiceId: string;
  kind: 'credits' | 'subscription';
  description: string;
  amountCents: number;
  currency: string;
  /** The provider's customer of this tenant, when one exists already. */
  customerId: string | null;
}

export interface Checkout {
  /** The provider's reference of the checkout (a Stripe checkout session id). */
  ref: string;
  url: string;
  customerId: string | null;
}

/** What billing does with a provider's webhook event (anything else is received and ignored). */
export type ProviderEvent =
  | { type: 'checkout_completed'; invoiceId: string; ref: string; customerId: string | null }
  | { type: 'checkout_expired'; invoiceId: string; ref: string }
  | { type: 'ignored'; eventType: string };

export interface PaymentProvider {
  readonly name: string;
  /** True: a payment succeeds in the call itself (no checkout, no webhook). */
  readonly settlesAtOnce: boolean;
  checkout(req: CheckoutRequest): Promise<Checkout>;
  /** The address of the billing portal for a tenant (the provider's, or our own page). */
  portal(tenantId: string, customerId: string | null): Promise<{ url: string; customerId: string | null }>;
  /** Verifies the signature over the raw body and reads the event; throws a 400 AppError when it does not verify. */
  parseWebhook(payload: Buffer, signature: string): ProviderEvent;
}
