// /requests: the request log (CONTRACT 12), one row per model call, newest first, filtered by time, model, key,
// source and status, 50 at a time with Load more; a row's time opens its detail.
import { useState } from 'preact/hooks';
import { call, listAll, type Item } from '../sdk';
import { Choice, ErrorText, FilterForm, Input, Table, integer, isoOf, text, useLoad, usePaged, when } from '../ui';

type Entry = Item<'listRequests'>;
const SOURCES = ['chat', 'agent', 'v1', 'passthrough', 'mcp'];
const STATUSES = ['ok', 'error', 'cancelled'];

function Detail({ id, close }: { id: string; close: () => void }) {
  const entry = useLoad(() => call('getRequest', { params: { id } }), [id]);
  const e = entry.data;
  return (
    <section aria-labelledby="detail-title" class="detail">
      <h2 id="detail-title" tabIndex={-1}>{`Request ${id}`}</h2>
      <ErrorText error={entry.error} />
      {e && (
        <dl class="facts">
          {Object.entries(e).map(([k, v]) => (
            <>
              <dt>{k}</dt>
              <dd>{v === null ? '—' : String(v)}</dd>
            </>
          ))}
        </dl>
      )}
      <p>
        <button type="button" class="secondary" onClick={close}>
          Close detail
        </button>
      </p>
    </section>
  );
}

export default function RequestsPage() {
  const [filters, setFilters] = useState<Record<string, string>>({});
  const keys = useLoad(() => listAll('listApiKeys', {}) as unknown as Promise<Array<{ id: string; name: string }>>, []);
  const log = usePaged('listRequests', { query: filters as any }, JSON.stringify(filters));
  const [open, setOpen] = useState<string>();
  const keyName = (id: string | null) => (id ? (keys.data?.find((k) => k.id === id)?.name ?? id) : 'session');
  return (
    <>
      <h1>Requests</h1>
      <FilterForm
        apply={setFilters}
        read={(f) => ({
          from: isoOf(f, 'from'),
          to: isoOf(f, 'to'),
          model: text(f, 'model'),
          apiKeyId: text(f, 'apiKeyId'),
          source: text(f, 'source'),
          status: text(f, 'status'),
        })}
      >
        <Input id="filter-from" name="from" label="From" type="datetime-local" />
        <Input id="filter-to" name="to" label="To" type="datetime-local" />
        <Input id="filter-model" name="model" label="Model name" maxLength={100} />
        <Choice id="filter-key" name="apiKeyId" label="API key" any="Any key" options={keys.data?.map((k) => [k.id, k.name]) ?? []} />
        <Choice id="filter-source" name="source" label="Source" any="Any source" options={SOURCES} />
        <Choice id="filter-status" name="status" label="Status" any="Any status" options={STATUSES} />
      </FilterForm>
      <ErrorText error={log.error} />
      {open && <Detail id={open} close={() => setOpen(undefined)} />}
      <Table
        id="requests"
        columns={['Time', 'Model', 'Key', 'Status', 'Tokens', 'Credits']}
        empty={log.loading ? 'Loading…' : 'No requests match.'}
        rows={log.items}
      >
        {log.items.map((r: Entry) => (
          <tr key={r.id}>
            <th scope="row">
              <button type="button" class="link" aria-label={`Details of the call at ${when(r.at)}`} onClick={() => setOpen(r.id)}>
                {when(r.at)}
              </button>
            </th>
            <td>{r.model}</td>
            <td>{keyName(r.apiKeyId)}</td>
            <td>{r.errorCode ? `${r.status} (${r.errorCode})` : r.status}</td>
            <td>{integer(r.inputTokens + r.outputTokens)}</td>
            <td>{integer(r.credits)}</td>
          </tr>
        ))}
      </Table>
      {log.more}
    </>
  );
}
