// /webhooks: the endpoints and a create form (the event types come with the page).
import { call, listAll } from '../sdk';
import { ErrorText, Form, props, Table, useLoad, when, useSearch } from '../ui';

export interface Webhook {
  id: string;
  url: string;
  events: string[];
  active: boolean;
  disabledReason: string | null;
  createdAt: string;
}

export default function WebhooksPage() {
  const { data, error, reload } = useLoad(() => listAll('listWebhooks', {}) as unknown as Promise<Webhook[]>, []);
  const { shown, box } = useSearch(data, (w) => w.url, 'Search by URL');
  const eventTypes = props<{ eventTypes: string[] }>().eventTypes ?? [];
  return (
    <>
      <h1>Webhooks</h1>
      <section aria-labelledby="create-title">
        <h2 id="create-title">Add an endpoint</h2>
        <Form
          submit="Add endpoint"
          reset
          onSubmit={async (f) => {
            await call('createWebhook', {
              body: { url: f.get('url') as string, secret: f.get('secret') as string, events: f.getAll('events') as any },
            });
            await reload();
          }}
        >
          <p class="field">
            <label for="webhook-url">Endpoint URL</label>
            <input id="webhook-url" name="url" type="url" required maxLength={2048} placeholder="https://example.com/hooks" />
          </p>
          <p class="field">
            <label for="webhook-secret">Signing secret</label>
            <input id="webhook-secret" name="secret" required minLength={16} maxLength={200} autoComplete="off" />
          </p>
          <fieldset>
            <legend>Events</legend>
            {eventTypes.map((t) => (
              <label class="check">
                <input type="checkbox" name="events" value={t} /> {t}
              </label>
            ))}
          </fieldset>
        </Form>
      </section>
      <ErrorText error={error} />
      <section aria-labelledby="list-title">
        <h2 id="list-title">Endpoints</h2>
        {box}
        <Table id="webhooks" columns={['URL', 'Events', 'State', 'Created']} empty="No endpoints yet." rows={shown}>
          {shown?.map((w) => (
            <tr key={w.id}>
              <th scope="row">
                <a href={`/webhooks/${w.id}`}>{w.url}</a>
              </th>
              <td>{w.events.join(', ')}</td>
              <td>{w.active ? 'active' : `disabled${w.disabledReason ? `: ${w.disabledReason}` : ''}`}</td>
              <td>{when(w.createdAt)}</td>
            </tr>
          ))}
        </Table>
      </section>
    </>
  );
}
