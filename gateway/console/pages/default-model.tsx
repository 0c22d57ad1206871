// /models/default: the tenant's default model (its LLM settings, CONTRACT 5): what a call naming no model uses,
// agents included. The key is write-only: left empty, the stored one stays.
import { useState } from 'preact/hooks';
import { call } from '../sdk';
import { ErrorText, Form, Input, num, Options, text, useLoad } from '../ui';

const PROVIDERS = ['openai', 'anthropic', 'openai-compatible'] as const;

export default function DefaultModelPage() {
  const llm = useLoad(() => call('getLlmSettings', {}) as Promise<Record<string, any>>, []);
  const [status, setStatus] = useState('');
  const d = llm.data;
  return (
    <>
      <h1>Default model</h1>
      <p>
        <a href="/models">Back to the catalogue</a>
      </p>
      <ErrorText error={llm.error} />
      {d && (
        <Form
          submit="Save default model"
          onSubmit={async (f) => {
            await call('updateLlmSettings', {
              body: {
                provider: f.get('provider') as (typeof PROVIDERS)[number],
                model: text(f, 'model'),
                baseUrl: text(f, 'baseUrl') ?? null,
                ...(text(f, 'apiKey') ? { apiKey: text(f, 'apiKey') } : {}),
                temperature: num(f, 'temperature') ?? null,
                maxTokens: num(f, 'maxTokens') ?? null,
              },
            });
            setStatus(`Saved: calls that name no model use ${text(f, 'model')}.`);
            await llm.reload();
          }}
        >
          <p class="field">
            <label for="llm-provider">Provider</label>
            <select id="llm-provider" name="provider">
              <Options values={PROVIDERS} current={d.provider ?? 'openai'} />
            </select>
          </p>
          <Input id="llm-model" name="model" label="Model" required maxLength={200} defaultValue={d.model ?? ''} />
          <Input id="llm-base-url" name="baseUrl" label="Base URL" type="url" maxLength={2000} defaultValue={d.baseUrl ?? ''} />
          <Input
            id="llm-api-key"
            name="apiKey"
            label={d.apiKeySet ? 'API key (stored; empty keeps it)' : 'API key'}
            type="password"
            autoComplete="off"
            maxLength={1000}
          />
          <Input
            id="llm-temperature"
            name="temperature"
            label="Temperature"
            type="number"
            min={0}
            max={2}
            step={0.1}
            defaultValue={d.temperature ?? ''}
          />
          <Input
            id="llm-max-tokens"
            name="maxTokens"
            label="Maximum output tokens"
            type="number"
            min={1}
            step={1}
            defaultValue={d.maxTokens ?? ''}
          />
        </Form>
      )}
      <p role="status">{status}</p>
    </>
  );
}
