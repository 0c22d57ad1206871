// /settings/secrets: names, descriptions and versions, never values. A value can be set (a new version) and a
// secret deleted; the value field is write-only.
import { useState } from 'preact/hooks';
import { call, listAll } from '../sdk';
import { ErrorText, Form, Table, useAction, useLoad, when, useSearch } from '../ui';

interface Secret {
  name: string;
  description: string;
  version: number;
  createdAt: string;
  updatedAt: string;
}

export default function SecretsPage() {
  const { data, error, reload } = useLoad(() => listAll('listSecrets', {}) as Promise<Secret[]>, []);
  const { shown, box } = useSearch(data, (s) => s.name);
  const [status, setStatus] = useState('');
  const changed = (s: string) => {
    setStatus(s);
    void reload();
  };
  const { error: rowError, act } = useAction(changed);
  return (
    <>
      <h1>Secrets</h1>
      <p>Values are encrypted at rest and never shown again after they are saved.</p>
      <section aria-labelledby="create-title">
        <h2 id="create-title">Add a secret</h2>
        <Form
          submit="Add secret"
          reset
          onSubmit={async (f) => {
            await call('createSecret', {
              body: {
                name: f.get('name') as string,
                value: f.get('value') as string,
                description: (f.get('description') as string) || undefined,
              },
            });
            changed(`Added ${f.get('name')}.`);
          }}
        >
          <p class="field">
            <label for="secret-name">Name</label>
            <input id="secret-name" name="name" required maxLength={100} autoComplete="off" />
          </p>
          <p class="field">
            <label for="secret-value">Value</label>
            <input id="secret-value" name="value" type="password" required autoComplete="off" />
          </p>
          <p class="field">
            <label for="secret-description">Description</label>
            <input id="secret-description" name="description" maxLength={500} />
          </p>
        </Form>
      </section>
      <p role="status">{status}</p>
      <ErrorText error={error ?? rowError} />
      {box}
      <Table id="secrets" columns={['Name', 'Description', 'Version', 'Updated', '']} empty="No secrets yet." rows={shown}>
        {shown?.map((s) => (
          <tr key={s.name}>
            <th scope="row" class="mono">
              {s.name}
            </th>
            <td>{s.description}</td>
            <td>{s.version}</td>
            <td>{when(s.updatedAt)}</td>
            <td>
              <button
                type="button"
                class="secondary"
                aria-label={`Delete ${s.name}`}
                onClick={() => act(() => call('deleteSecret', { params: { name: s.name } }), `Deleted ${s.name}.`)}
              >
                Delete
              </button>
            </td>
          </tr>
        ))}
      </Table>
    </>
  );
}
