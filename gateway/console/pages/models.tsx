// /models: the tenant's model catalogue (CONTRACT 12): every entry with the price its calls are billed at and where
// that price comes from; add, edit, disable and delete; and the default model (the tenant's LLM settings).
import { useState } from 'preact/hooks';
import { call, listAll, type Item } from '../sdk';
import { DeleteButton, ErrorText, Form, Input, num, Options, Table, text, useAction, useLoad, useSearch } from '../ui';

type Model = Item<'listModels'>;
const PROVIDERS = ['openai', 'anthropic', 'openai-compatible', 'azure-openai', 'gemini', 'bedrock'] as const;
const SOURCES: Record<Model['priceSource'], string> = {
  entry: 'its own price',
  platform: "the platform's price list",
  default: 'the default price',
};

/** The form's body: an empty price field leaves the price to the platform's list (or the default). */
function modelBody(f: FormData) {
  const input = num(f, 'priceInput');
  const output = num(f, 'priceOutput');
  return {
    name: text(f, 'name')!,
    provider: f.get('provider') as Model['provider'],
    upstreamModel: text(f, 'upstreamModel'),
    baseUrl: text(f, 'baseUrl') ?? null,
    // Write-only: an edit without a key keeps the one stored.
    ...(text(f, 'apiKey') ? { apiKey: text(f, 'apiKey') } : {}),
    price: input === undefined && output === undefined ? null : { input: input ?? 0, output: output ?? 0 },
  };
}

function ModelFields({ editing }: { editing?: Model }) {
  const own = editing?.priceSource === 'entry';
  return (
    <>
      <p class="field">
        <label for="model-name">Name</label>
        <input id="model-name" name="name" required maxLength={100} pattern="[A-Za-z0-9._:/\-]+" defaultValue={editing?.name} />
      </p>
      <p class="field">
        <label for="model-provider">Provider</label>
        <select id="model-provider" name="provider">
          <Options values={PROVIDERS} current={editing?.provider ?? 'openai'} />
        </select>
      </p>
      <p class="field">
        <label for="model-upstream">Model</label>
        <input
          id="model-upstream"
          name="upstreamModel"
          maxLength={200}
          defaultValue={editing?.upstreamModel}
          aria-describedby="model-upstream-hint"
        />
        <small id="model-upstream-hint">The provider's model id; empty: the name.</small>
      </p>
      <p class="field">
        <label for="model-base-url">Base URL</label>
        <input id="model-base-url" name="baseUrl" type="url" maxLength={2000} defaultValue={editing?.baseUrl ?? ''} />
      </p>
      <p class="field">
        <label for="model-api-key">API key</label>
        <input id="model-api-key" name="apiKey" type="password" autoComplete="off" maxLength={1000} aria-describedby="model-api-key-hint" />
        <small id="model-api-key-hint">
          {editing?.apiKeySet ? 'A key is stored; leave empty to keep it.' : 'Stored encrypted, never shown again.'}
        </small>
      </p>
      <Input
        id="model-price-input"
        name="priceInput"
        label="Input price"
        type="number"
        min={0}
        step="any"
        defaultValue={own ? String(editing!.price.input) : ''}
        aria-describedby="model-price-hint"
      />
      <Input
        id="model-price-output"
        name="priceOutput"
        label="Output price"
        type="number"
        min={0}
        step="any"
        defaultValue={own ? String(editing!.price.output) : ''}
        aria-describedby="model-price-hint"
      />
      <p id="model-price-hint">
        <small>Credits per 1M tokens. Empty: the platform's price list for the model, else the default price.</small>
      </p>
    </>
  );
}

function ModelRow({ model, edit, changed }: { model: Model; edit: () => void; changed: (m: string) => void }) {
  const { error, act } = useAction(changed);
  const label = `${model.name} (${model.provider} ${model.upstreamModel})`;
  return (
    <tr>
      <th scope="row">{model.name}</th>
      <td>{model.provider}</td>
      <td>{model.upstreamModel}</td>
      <td>{`${model.price.input} in / ${model.price.output} out`}</td>
      <td>{SOURCES[model.priceSource]}</td>
      <td>{model.enabled ? 'enabled' : 'disabled'}</td>
      <td class="actions">
        <button type="button" class="secondary" aria-label={`Edit ${label}`} onClick={edit}>
          Edit
        </button>{' '}
        <button
          type="button"
          class="secondary"
          aria-label={`${model.enabled ? 'Disable' : 'Enable'} ${label}`}
          onClick={() =>
            act(
              () => call('updateModel', { params: { id: model.id }, body: { enabled: !model.enabled } }),
              `${model.name} ${model.enabled ? 'disabled' : 'enabled'}.`,
            )
          }
        >
          {model.enabled ? 'Disable' : 'Enable'}
        </button>{' '}
        <DeleteButton
          label={label}
          confirm={() => act(() => call('deleteModel', { params: { id: model.id } }), `Deleted ${model.name}.`)}
        />
        <ErrorText error={error} />
      </td>
    </tr>
  );
}

export default function ModelsPage() {
  const models = useLoad(() => listAll('listModels', {}), []);
  const llm = useLoad(() => call('getLlmSettings', {}) as Promise<Record<string, any>>, []);
  const [editing, setEditing] = useState<Model>();
  const [status, setStatus] = useState('');
  const { shown, box } = useSearch(models.data, (m) => m.name);
  const changed = (message: string) => {
    setStatus(message);
    void models.reload();
  };
  const d = llm.data;
  return (
    <>
      <h1>Models</h1>
      <section aria-labelledby="default-title">
        <h2 id="default-title">Default model</h2>
        <p>
          {d?.model
            ? `Calls that name no model use ${d.model} (${d.provider}${d.baseUrl ? `, ${d.baseUrl}` : ''}), billed at the default price.`
            : 'No default model: a call must name one of the models below.'}{' '}
          <a href="/models/default">Change the default model</a>
        </p>
        <ErrorText error={llm.error} />
      </section>
      <section aria-labelledby="form-title">
        <h2 id="form-title">{editing ? `Edit ${editing.name}` : 'Add a model'}</h2>
        <Form
          key={editing?.id ?? 'new'}
          submit={editing ? 'Save model' : 'Add model'}
          reset={!editing}
          onSubmit={async (f) => {
            if (editing) {
              await call('updateModel', { params: { id: editing.id }, body: modelBody(f) });
              setEditing(undefined);
              changed(`Saved ${text(f, 'name')}.`);
            } else {
              const m = await call('createModel', { body: modelBody(f) });
              changed(`Added ${m.name}: billed at ${m.price.input} in / ${m.price.output} out (${SOURCES[m.priceSource]}).`);
            }
          }}
        >
          <ModelFields editing={editing} />
        </Form>
        {editing && (
          <p>
            <button type="button" class="secondary" onClick={() => setEditing(undefined)}>
              Cancel edit
            </button>
          </p>
        )}
      </section>
      <p role="status">{status}</p>
      <ErrorText error={models.error} />
      <section aria-labelledby="list-title">
        <h2 id="list-title">Catalogue</h2>
        {box}
        <Table
          id="models"
          columns={['Name', 'Provider', 'Model', 'Price (credits per 1M tokens)', 'Price from', 'State', '']}
          empty="No models yet."
          rows={shown}
        >
          {shown?.map((m) => (
            <ModelRow
              key={m.id}
              model={m}
              changed={changed}
              edit={() => {
                setEditing(m);
                document.getElementById('model-name')?.focus();
              }}
            />
          ))}
        </Table>
      </section>
    </>
  );
}
