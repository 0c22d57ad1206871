// /webhooks/:id: one endpoint (disable or enable, rotate its signing secret, delete), a test event, and its delivery
// log (event type, status, attempts) with re-send.
import { useState } from 'preact/hooks';
import { call, listAll } from '../sdk';
import { DeleteButton, ErrorText, Form, Table, isoOf, num, useAction, useLoad, usePaged, when } from '../ui';
import type { Webhook } from './webhooks';

interface Delivery {
  id: string;
  eventId: string;
  eventType: string;
  status: 'pending' | 'succeeded' | 'failed';
  attempts: Array<{ number: number; statusCode: number | null; latencyMs: number; error: string | null; at?: string }>;
  createdAt: string;
}

export default function WebhookPage() {
  const id = decodeURIComponent(location.pathname.split('/')[2] ?? '');
  const webhook = useLoad(() => call('getWebhook', { params: { id } }) as unknown as Promise<Webhook>, [id]);
  const deliveries = useLoad(() => listAll('listWebhookDeliveries', { params: { id } }) as unknown as Promise<Delivery[]>, [id]);
  // Events of its types it has not received (failed, or never tried while disabled): CONTRACT 10.
  const missed = usePaged('listEvents', { query: { deliveryFailed: true, webhookId: id } }, id);
  const [status, setStatus] = useState('');
  const { error, act } = useAction((done) => {
    setStatus(done);
    void webhook.reload();
    void deliveries.reload();
    void missed.reload();
  });
  const [secret, setSecret] = useState<string>();
  if (webhook.error) return <ErrorText error={webhook.error} />;
  if (!webhook.data) return <p aria-busy="true">Loading…</p>;
  return (
    <>
      <h1>{webhook.data.url}</h1>
      <dl class="facts">
        <dt>Events</dt>
        <dd>{webhook.data.events.join(', ')}</dd>
        <dt>State</dt>
        <dd>{webhook.data.active ? 'active' : `disabled${webhook.data.disabledReason ? `: ${webhook.data.disabledReason}` : ''}`}</dd>
      </dl>
      <p class="actions">
        <button type="button" onClick={() => act(() => call('testWebhook', { params: { id } }), 'Test event sent.')}>
          Send a test event
        </button>{' '}
        <button type="button" class="secondary" onClick={() => act(async () => undefined, 'Refreshed.')}>
          Refresh
        </button>{' '}
        <button
          type="button"
          class="secondary"
          onClick={() =>
            act(
              () => call('updateWebhook', { params: { id }, body: { active: !webhook.data!.active } }),
              webhook.data!.active ? 'Disabled: no deliveries until it is enabled.' : 'Enabled.',
            )
          }
        >
          {webhook.data.active ? 'Disable' : 'Enable'}
        </button>{' '}
        <DeleteButton
          label={webhook.data.url}
          confirm={() =>
            act(async () => {
              await call('deleteWebhook', { params: { id } });
              location.assign('/webhooks');
            }, 'Deleted.')
          }
        />
      </p>
      <p role="status">{status}</p>
      <ErrorText error={error ?? deliveries.error} />
      <section aria-labelledby="secret-title">
        <h2 id="secret-title">Signing secret</h2>
        <Form
          submit="Rotate secret"
          onSubmit={async (f) => {
            const res = await call('rotateWebhookSecret', { params: { id }, body: { graceHours: num(f, 'graceHours') ?? 24 } });
            setSecret(res.secret);
            setStatus(res.graceEndsAt ? `Secret rotated: the old one also signs until ${when(res.graceEndsAt)}.` : 'Secret rotated.');
          }}
        >
          <p class="field">
            <label for="grace-hours">Hours the old secret keeps signing</label>
            <input id="grace-hours" name="graceHours" type="number" min={0} max={168} step="any" placeholder="24" />
          </p>
        </Form>
        {secret && (
          <p class="field">
            <label for="new-secret">New signing secret (shown once)</label>
            <input id="new-secret" class="mono" readOnly value={secret} />
          </p>
        )}
      </section>
      <section aria-labelledby="deliveries-title">
        <h2 id="deliveries-title">Deliveries</h2>
        <Table
          id="deliveries"
          columns={['Event type', 'Status', 'Attempts', 'Last answer', 'Created', '']}
          empty="No deliveries yet."
          rows={deliveries.data}
        >
          {deliveries.data?.map((d) => {
            const last = d.attempts.at(-1);
            return (
              <tr key={d.id}>
                <th scope="row">{d.eventType}</th>
                <td>{d.status}</td>
                <td>{d.attempts.length}</td>
                <td>{last ? (last.statusCode ?? last.error ?? '') : ''}</td>
                <td>{when(d.createdAt)}</td>
                <td>
                  {d.status !== 'pending' && (
                    <button
                      type="button"
                      class="secondary"
                      aria-label={`Re-send ${d.eventType} ${d.eventId}`}
                      onClick={() => act(() => call('retryWebhookDelivery', { params: { id, deliveryId: d.id } }), 'Re-sent.')}
                    >
                      Re-send
                    </button>
                  )}
                </td>
              </tr>
            );
          })}
        </Table>
      </section>
      <section aria-labelledby="missed-title">
        <h2 id="missed-title">Missed events</h2>
        <ErrorText error={missed.error} />
        <Table
          id="missed"
          columns={['Event id', 'Event type', 'Created']}
          empty={missed.loading ? 'Loading…' : 'No missed events.'}
          rows={missed.items}
        >
          {missed.items.map((e) => (
            <tr key={e.id}>
              <th scope="row" class="mono">
                {e.id}
              </th>
              <td>{e.type}</td>
              <td>{when(e.createdAt)}</td>
            </tr>
          ))}
        </Table>
        {missed.more}
        <Form
          submit="Recover"
          onSubmit={async (f) => {
            const res = await call('recoverWebhook', { params: { id }, body: { since: isoOf(f, 'since')!, until: isoOf(f, 'until') } });
            setStatus(`Recover queued ${(res as any).queued} events for delivery.`);
            void missed.reload();
            void deliveries.reload();
          }}
        >
          <p class="field">
            <label for="recover-since">Deliver again events since</label>
            <input id="recover-since" name="since" type="datetime-local" required />
          </p>
          <p class="field">
            <label for="recover-until">Until (empty: now)</label>
            <input id="recover-until" name="until" type="datetime-local" />
          </p>
        </Form>
      </section>
    </>
  );
}
