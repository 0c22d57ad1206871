// /settings/secrets: names, descriptions and versions, never values. A value can be set (a new version, in the
// secret's row) and a secret deleted; the value fields are write-only.
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

type Act = ReturnType<typeof useAction>['act'];

/** A secret's row: a new value (its next version) typed in place, or the secret deleted. */
function SecretRow({ secret: s, act }: { secret: Secret; act: Act }) {
  const [setting, setSetting] = useState(false);
  return (
    <tr>
      <th scope="row" class="mono">
        {s.name}
        {setting && (
          <Form
            submit="Save value"
            onSubmit={(f) =>
              act(
                () => call('updateSecret', { params: { name: s.name }, body: { value: f.get('value') as string } }),
                `Saved version ${s.version + 1} of ${s.name}.`,
              )
            }
          >
            <label class="sr-only" for={`value-${s.name}`}>{`Next value of ${s.name}`}</label>
            <input id={`value-${s.name}`} name="value" type="password" required autoComplete="off" />
          </Form>
        )}
      </th>
      <td>{s.description}</td>
      <td>{s.version}</td>
      <td>{when(s.updatedAt)}</td>
      <td class="actions">
        <button type="button" class="secondary" aria-label={`New value of ${s.name}`} onClick={() => setSetting(!setting)}>
          {setting ? 'Cancel' : 'New value'}
        </button>{' '}
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
  );
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
          <SecretRow key={s.name} secret={s} act={act} />
        ))}
      </Table>
    </>
  );
}
