// /events: the tenant's events (CONTRACT 10), newest first, filtered by type and time, 50 at a time; an event's
// body as its webhooks receive it.
import { useState } from 'preact/hooks';
import { type Item } from '../sdk';
import { ErrorText, Table, isoOf, props, text, usePaged, when } from '../ui';

type Event = Item<'listEvents'>;

export default function EventsPage() {
  const { eventTypes = [] } = props<{ eventTypes: string[] }>();
  const [filters, setFilters] = useState<Record<string, string>>({});
  const events = usePaged('listEvents', { query: filters as any }, JSON.stringify(filters));
  const [open, setOpen] = useState<string>();
  return (
    <>
      <h1>Events</h1>
      <form
        class="filters"
        aria-label="Filters"
        onSubmit={(event) => {
          event.preventDefault();
          const f = new FormData(event.currentTarget as HTMLFormElement);
          const next: Record<string, string> = {};
          for (const [k, v] of Object.entries({ type: text(f, 'type'), after: isoOf(f, 'after'), before: isoOf(f, 'before') }))
            if (v) next[k] = v;
          setFilters(next);
        }}
      >
        <p class="field">
          <label for="event-type">Type</label>
          <select id="event-type" name="type">
            <option value="">Any type</option>
            {eventTypes.map((t) => (
              <option value={t}>{t}</option>
            ))}
          </select>
        </p>
        <p class="field">
          <label for="event-after">After</label>
          <input id="event-after" name="after" type="datetime-local" />
        </p>
        <p class="field">
          <label for="event-before">Before</label>
          <input id="event-before" name="before" type="datetime-local" />
        </p>
        <p>
          <button type="submit">Filter</button>
        </p>
      </form>
      <ErrorText error={events.error} />
      <Table
        id="events"
        columns={['Type', 'Time', 'Event id', '']}
        empty={events.loading ? 'Loading…' : 'No events match.'}
        rows={events.items}
      >
        {events.items.map((e: Event) => (
          <>
            <tr key={e.id}>
              <th scope="row">{e.type}</th>
              <td>{when(e.createdAt)}</td>
              <td class="mono">{e.id}</td>
              <td>
                <button
                  type="button"
                  class="secondary"
                  aria-expanded={open === e.id}
                  aria-label={`Body of ${e.type} ${e.id}`}
                  onClick={() => setOpen(open === e.id ? undefined : e.id)}
                >
                  Body
                </button>
              </td>
            </tr>
            {open === e.id && (
              <tr>
                <td colSpan={4}>
                  <pre class="output">{JSON.stringify(e, null, 2)}</pre>
                </td>
              </tr>
            )}
          </>
        ))}
      </Table>
      {events.more}
    </>
  );
}
