// /events: the tenant's events (CONTRACT 10), newest first, filtered by type and time, 50 at a time; an event's
// body as its webhooks receive it.
import { useState } from 'preact/hooks';
import { type Item } from '../sdk';
import { Choice, ErrorText, FilterForm, Input, Table, isoOf, props, text, usePaged, when } from '../ui';

type Event = Item<'listEvents'>;

export default function EventsPage() {
  const { eventTypes = [] } = props<{ eventTypes: string[] }>();
  const [filters, setFilters] = useState<Record<string, string>>({});
  const events = usePaged('listEvents', { query: filters as any }, JSON.stringify(filters));
  const [open, setOpen] = useState<string>();
  return (
    <>
      <h1>Events</h1>
      <FilterForm apply={setFilters} read={(f) => ({ type: text(f, 'type'), after: isoOf(f, 'after'), before: isoOf(f, 'before') })}>
        <Choice id="event-type" name="type" label="Type" any="Any type" options={eventTypes} />
        <Input id="event-after" name="after" label="After" type="datetime-local" />
        <Input id="event-before" name="before" label="Before" type="datetime-local" />
      </FilterForm>
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
