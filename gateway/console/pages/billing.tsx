// /settings/billing: plan, balance and usage; buy credits, redeem a gift card, change plan (the sandbox provider
// settles at once; a provider with a checkout sends the browser there); invoices; the billing alerts; and the
// provider's own portal where it has one.
import { useState } from 'preact/hooks';
import { call, listAll } from '../sdk';
import { ErrorText, Form, Table, integer, num, text, useAction, useLoad, when } from '../ui';

const PLANS = ['starter', 'growth', 'enterprise'];

interface Payment {
  status: string;
  provider: string;
  checkoutUrl?: string | null;
  invoice?: { credits?: number };
}

export default function BillingPage() {
  const data = useLoad(async () => {
    const [summary, invoices] = await Promise.all([call('getBillingSummary', {}), listAll('listInvoices', {})]);
    return { summary: summary as any, invoices: invoices as any[] };
  }, []);
  const alerts = useLoad(() => call('getBillingAlerts', {}) as Promise<Record<string, any>>, []);
  const [status, setStatus] = useState('');
  // The portal's answer says what to show (or where to go): nothing more to report once it has.
  const portal = useAction(() => undefined);
  /** A payment: the sandbox settles at once; a provider with a checkout (Stripe) takes the user there. */
  const settled = async (payment: Payment, what: string) => {
    if (payment.status === 'pending' && payment.checkoutUrl) return location.assign(payment.checkoutUrl);
    setStatus(`${what} (${payment.provider}${payment.provider === 'sandbox' ? ': settled at once, no money moved' : ''}).`);
    await data.reload();
  };
  const s = data.data?.summary;
  const a = alerts.data;
  return (
    <>
      <h1>Billing</h1>
      <ErrorText error={data.error} />
      <dl class="facts">
        <dt>Plan</dt>
        <dd>{s?.plan}</dd>
        <dt>Credits</dt>
        <dd>{s ? integer(s.credits.balance) : ''}</dd>
        <dt>Reserved by calls in progress</dt>
        <dd>{s ? integer(s.credits.reserved ?? 0) : ''}</dd>
        <dt>Usage</dt>
        <dd>{s ? `${s.usage.calls} model calls, ${s.usage.credits} credits` : ''}</dd>
      </dl>
      <p>
        <button
          type="button"
          class="secondary"
          onClick={() =>
            portal.act(async () => {
              const { url, provider } = await call('createBillingPortal', {});
              // A provider's own portal (Stripe: payment methods, receipts) is elsewhere; the sandbox's is this page.
              if (new URL(url, location.href).pathname !== location.pathname) return location.assign(url);
              setStatus(`The ${provider} provider has no portal of its own: this page is its portal.`);
            }, '')
          }
        >
          Open the billing portal
        </button>
      </p>
      <ErrorText error={portal.error} />
      <p role="status">{status}</p>
      <section aria-labelledby="buy-title">
        <h2 id="buy-title">Buy credits</h2>
        <Form
          submit="Buy credits"
          onSubmit={async (f) => {
            const payment = (await call('purchaseCredits', { body: { credits: num(f, 'credits')! } })) as unknown as Payment;
            await settled(payment, `Bought ${payment.invoice?.credits ?? num(f, 'credits')} credits`);
          }}
        >
          <p class="field">
            <label for="credits">Credits</label>
            <input id="credits" name="credits" type="number" min={1} max={10_000_000} step={1} required defaultValue="1000" />
          </p>
        </Form>
      </section>
      <section aria-labelledby="gift-title">
        <h2 id="gift-title">Redeem a gift card</h2>
        <Form
          submit="Redeem"
          reset
          onSubmit={async (f) => {
            const res = await call('redeemGiftCard', { body: { code: text(f, 'code')! } });
            setStatus(`Redeemed: ${res.creditsAdded} credits added.`);
            await data.reload();
          }}
        >
          <p class="field">
            <label for="gift-code">Gift card code</label>
            <input id="gift-code" name="code" required maxLength={64} autoComplete="off" />
          </p>
        </Form>
      </section>
      <section aria-labelledby="plan-title">
        <h2 id="plan-title">Change plan</h2>
        <Form
          submit="Subscribe"
          onSubmit={async (f) => {
            const plan = f.get('plan') as string;
            const payment = (await call('createSubscription', { body: { plan: plan as any } })) as unknown as Payment;
            await settled(payment, `Subscribed to ${plan}`);
          }}
        >
          <p class="field">
            <label for="plan-choice">Plan</label>
            <select id="plan-choice" name="plan">
              {PLANS.map((p) => (
                <option value={p}>{p}</option>
              ))}
            </select>
          </p>
        </Form>
      </section>
      <section aria-labelledby="alerts-title">
        <h2 id="alerts-title">Billing alerts</h2>
        <p>Each crossing emits one billing.threshold_crossed event (to your webhooks); going back re-arms it.</p>
        <ErrorText error={alerts.error} />
        {a && (
          <Form
            submit="Save alerts"
            onSubmit={async (f) => {
              const percents = (text(f, 'keyBudgetPercents') ?? '')
                .split(/[\s,]+/)
                .filter(Boolean)
                .map(Number);
              await call('putBillingAlerts', {
                body: {
                  ...(num(f, 'balanceBelow') !== undefined ? { balanceBelow: num(f, 'balanceBelow') } : {}),
                  ...(percents.length ? { keyBudgetPercents: percents } : {}),
                  ...(num(f, 'dailyCreditsAbove') !== undefined ? { dailyCreditsAbove: num(f, 'dailyCreditsAbove') } : {}),
                },
              });
              setStatus('Billing alerts saved.');
              await alerts.reload();
            }}
          >
            <p class="field">
              <label for="alert-balance">Alert when the balance falls below</label>
              <input id="alert-balance" name="balanceBelow" type="number" step={1} defaultValue={a.balanceBelow ?? ''} />
            </p>
            <p class="field">
              <label for="alert-key-budget">Alert when a key spends these percents of its budget (comma separated)</label>
              <input id="alert-key-budget" name="keyBudgetPercents" defaultValue={(a.keyBudgetPercents ?? []).join(', ')} />
            </p>
            <p class="field">
              <label for="alert-daily">Alert when a day's debits rise above</label>
              <input id="alert-daily" name="dailyCreditsAbove" type="number" min={0} step={1} defaultValue={a.dailyCreditsAbove ?? ''} />
            </p>
          </Form>
        )}
      </section>
      <section aria-labelledby="invoices-title">
        <h2 id="invoices-title">Invoices</h2>
        <Table
          id="invoices"
          columns={['Date', 'Description', 'Amount', 'Status', 'Provider']}
          empty="No invoices yet."
          rows={data.data?.invoices}
        >
          {data.data?.invoices.map((i) => (
            <tr key={i.id}>
              <td>{when(i.createdAt)}</td>
              <td>{i.description}</td>
              <td>{`${(i.amountCents / 100).toFixed(2)} ${String(i.currency).toUpperCase()}`}</td>
              <td>{i.status}</td>
              <td>{i.provider}</td>
            </tr>
          ))}
        </Table>
      </section>
    </>
  );
}
