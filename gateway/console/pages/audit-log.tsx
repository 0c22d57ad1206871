// /audit-log: the tenant's audit log (CONTRACT 10), newest first, filtered by action and actor, 50 at a time; and
// the chain's verification (GET /audit-log/verify).
import { useState } from 'preact/hooks';
import { call, type Item } from '../sdk';
import { ErrorText, FilterForm, Input, Table, integer, isoOf, text, useLoad, usePaged, when } from '../ui';

type Entry = Item<'listAuditLog'>;

const actorOf = (a: any) => (a.email ?? (a.keyPrefix ? `key ${a.keyPrefix}…` : `${a.type}${a.id ? ` ${a.id}` : ''}`)) as string;

export default function AuditLogPage() {
  const [filters, setFilters] = useState<Record<string, string>>({});
  const verify = useLoad(() => call('verifyAuditLog', {}), []);
  const log = usePaged('listAuditLog', { query: filters as any }, JSON.stringify(filters));
  const v = verify.data;
  return (
    <>
      <h1>Audit log</h1>
      <section aria-labelledby="verify-title">
        <h2 id="verify-title">Verification</h2>
        <ErrorText error={verify.error} />
        <p id="verification">
          {v
            ? v.valid
              ? `The chain is intact: ${integer(v.entries)} entries checked.`
              : `The chain is broken at entry ${v.firstBrokenId} (${integer(v.entries)} entries checked).`
            : 'Checking…'}
        </p>
        <p>
          <button type="button" class="secondary" onClick={() => verify.reload()}>
            Verify again
          </button>
        </p>
      </section>
      <FilterForm
        apply={setFilters}
        read={(f) => ({ action: text(f, 'action'), actor: text(f, 'actor'), after: isoOf(f, 'after'), before: isoOf(f, 'before') })}
      >
        <Input id="audit-action" name="action" label="Action" maxLength={100} placeholder="api_key.created" />
        <Input id="audit-actor" name="actor" label="Actor id" maxLength={100} />
        <Input id="audit-after" name="after" label="After" type="datetime-local" />
        <Input id="audit-before" name="before" label="Before" type="datetime-local" />
      </FilterForm>
      <ErrorText error={log.error} />
      <Table
        id="audit"
        columns={['Time', 'Actor', 'Action', 'Target', 'IP', 'Changes']}
        empty={log.loading ? 'Loading…' : 'No entries match.'}
        rows={log.items}
      >
        {log.items.map((e: Entry) => {
          const x = e as any;
          return (
            <tr key={x.id}>
              <td>{when(x.at)}</td>
              <td>{actorOf(x.actor)}</td>
              <th scope="row">{x.action}</th>
              <td>{`${x.target.type} ${x.target.id}`}</td>
              <td>{x.ip ?? ''}</td>
              <td class="mono">{x.changes ? JSON.stringify(x.changes) : ''}</td>
            </tr>
          );
        })}
      </Table>
      {log.more}
    </>
  );
}
